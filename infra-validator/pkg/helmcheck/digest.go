package helmcheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

// ErrManifestMismatch is returned by a DigestPostRenderer with an Expected
// digest when Helm is about to install something else.
var ErrManifestMismatch = errors.New("ManifestMismatch: the rendered manifests do not match the approved manifestDigest")

// ManifestDigest returns "sha256:" and the hex sha256 of the manifest bytes
// Helm hands to a post-renderer.
func ManifestDigest(manifest []byte) string {
	sum := sha256.Sum256(manifest)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// DigestPostRenderer is a Helm post-renderer that records and hashes what
// Helm is about to install (the sorted non-hook manifests, each written as
// "---\n# Source: <file>\n<content>\n") and returns it unchanged. With
// Expected set it refuses, with ErrManifestMismatch, anything whose digest
// differs: the operator's Helm applier sets it to the approved
// manifestDigest on action.Install/Upgrade.PostRenderer, so what is
// installed is what was approved. Hooks are not passed to post-renderers,
// so the digest does not cover them. Use one value per install; it is safe
// for concurrent use but keeps only the last run.
type DigestPostRenderer struct {
	// Expected is the approved digest; empty means record only.
	Expected string

	mu       sync.Mutex
	digest   string
	manifest []byte
	ran      bool
}

// Run implements postrender.PostRenderer.
func (d *DigestPostRenderer) Run(rendered *bytes.Buffer) (*bytes.Buffer, error) {
	if rendered == nil {
		rendered = &bytes.Buffer{}
	}
	data := bytes.Clone(rendered.Bytes())
	digest := ManifestDigest(data)
	d.mu.Lock()
	d.digest, d.manifest, d.ran = digest, data, true
	d.mu.Unlock()
	if d.Expected != "" && d.Expected != digest {
		return nil, fmt.Errorf("%w: rendered %s, approved %s", ErrManifestMismatch, digest, d.Expected)
	}
	return bytes.NewBuffer(bytes.Clone(data)), nil
}

// Digest returns the digest of the last run, and whether it ran.
func (d *DigestPostRenderer) Digest() (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.digest, d.ran
}

// Manifest returns the bytes of the last run.
func (d *DigestPostRenderer) Manifest() []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.manifest
}

// LoadChart loads a chart folder or packaged chart (.tgz).
func LoadChart(path string) (*chart.Chart, error) {
	ch, err := loader.Load(path)
	if err != nil {
		return nil, fmt.Errorf("loading chart: %w", err)
	}
	return ch, nil
}

// MergeValues reads values files and merges them in order, later files
// winning, as `helm -f a.yaml -f b.yaml` does. Only local files are read
// (no URLs, no stdin).
func MergeValues(files []string) (map[string]any, error) {
	base := map[string]any{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("values file: %w", err)
		}
		current := map[string]any{}
		if err := yaml.Unmarshal(data, &current); err != nil {
			return nil, fmt.Errorf("values file %s: %w", f, err)
		}
		base = mergeMaps(base, current)
	}
	return base, nil
}

// mergeMaps is Helm's merge of values files: nested maps merge, any other
// value replaces.
func mergeMaps(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if v, ok := v.(map[string]any); ok {
			if bv, ok := out[k]; ok {
				if bv, ok := bv.(map[string]any); ok {
					out[k] = mergeMaps(bv, v)
					continue
				}
			}
		}
		out[k] = v
	}
	return out
}

// DefaultKubeVersion is the Kubernetes version charts are rendered for when
// Options.KubeVersion is empty (the version Sluice is tested against).
const DefaultKubeVersion = "v1.37.2"

// parseKubeVersion accepts "v1.37.2" or "1.37.2".
func parseKubeVersion(v string) (*chartutil.KubeVersion, error) {
	if v == "" {
		v = DefaultKubeVersion
	}
	kv, err := chartutil.ParseKubeVersion(v)
	if err != nil {
		return nil, fmt.Errorf("kubernetes version %q: %w", v, err)
	}
	return kv, nil
}
