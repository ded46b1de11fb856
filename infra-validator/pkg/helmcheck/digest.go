package helmcheck

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"
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

// hookDigestHeader starts the framed record ReleaseDigest hashes for a
// chart with hooks. What Helm hands a post-renderer is empty or starts
// with "---", so the two forms never hash the same bytes.
const hookDigestHeader = "sluice-manifest-and-hooks/v1\n"

// ReleaseDigest returns the manifestDigest of a render: the manifests
// Helm hands a post-renderer and the hooks Helm keeps out of it. A chart
// without hooks gets ManifestDigest(manifest), the digest of exactly the
// post-renderer's input. A chart with hooks gets "sha256:" and the hex
// sha256 of a framed record:
//
//	sluice-manifest-and-hooks/v1\n
//	manifest <len>\n<manifest>
//	hook <len(path)> <len(content)>\n<path><content>   (per hook, sorted by path, then content)
//
// where a hook's path is its template file and its content the hook's
// rendered YAML, as Helm stores them in the release record (release.Hook
// Path and Manifest); events, weight and delete policies are annotations
// inside the content. The validator computes it from its render and the
// Helm applier from the release record Helm is about to store, before any
// hook runs, so hooks are covered by the approval like every manifest.
func ReleaseDigest(manifest []byte, hooks []*release.Hook) string {
	if len(hooks) == 0 {
		return ManifestDigest(manifest)
	}
	sorted := slices.Clone(hooks)
	slices.SortStableFunc(sorted, func(a, b *release.Hook) int {
		if c := strings.Compare(a.Path, b.Path); c != 0 {
			return c
		}
		return strings.Compare(a.Manifest, b.Manifest)
	})
	h := sha256.New()
	fmt.Fprintf(h, "%smanifest %d\n", hookDigestHeader, len(manifest))
	h.Write(manifest)
	for _, hk := range sorted {
		fmt.Fprintf(h, "hook %d %d\n%s%s", len(hk.Path), len(hk.Manifest), hk.Path, hk.Manifest)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil))
}

// DigestPostRenderer is a Helm post-renderer that records and hashes what
// Helm is about to install (the sorted non-hook manifests, each written as
// "---\n# Source: <file>\n<content>\n") and returns it unchanged. With
// Expected set it refuses, with ErrManifestMismatch, anything whose digest
// differs. Hooks are not passed to post-renderers, so its digest alone
// covers a chart without hooks only; ReleaseDigest is the manifestDigest
// of any chart. Use one value per install; it is safe for concurrent use
// but keeps only the last run.
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
