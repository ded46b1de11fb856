package sources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	yaml "go.yaml.in/yaml/v3"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/release"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// inflatedPrefix names the file a build reads in place of a helmCharts
// entry: "<kustomization folder>/.sluice-helmchart-<n>.yaml". It exists
// only in the build's file system.
const inflatedPrefix = ".sluice-helmchart-"

// KustomizeChartFiles are the files of a chart fetched for the helmCharts
// entry h, keyed by their path in the artifact (under h.Root()).
func KustomizeChartFiles(h manifest.HelmChart, c *chartrepo.Chart) (map[string][]byte, error) {
	files, err := RemoteChartFiles(c)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(files))
	for name, data := range files {
		out[path.Join(h.Root(), strings.TrimPrefix(name, RemoteChartDir+"/"))] = data
	}
	return out, nil
}

// KustomizeChart loads the chart fetched for the helmCharts entry h from
// the content at root, checked as RemoteChart checks a service's chart:
// the entry's repository and chart at a version in its range, bytes that
// hash to the recorded digest, a safe archive.
func KustomizeChart(root string, h manifest.HelmChart) (*chart.Chart, *chartrepo.Resolved, error) {
	ch, r, err := loadFetched(root, h.Root(), manifest.Chart{Repo: h.Repo, Name: h.Name, Version: h.Version})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, fmt.Errorf("helmCharts %s: %w", h, ErrRemoteChartMissing)
	}
	return ch, r, err
}

// loadFetched loads a fetched chart from the repo-relative folder dir of
// the content at root, checked against want: the repository and chart at a
// version in its range (CheckResolved), bytes that hash to the recorded
// digest (chartrepo.Verify), a safe archive (chartrepo.Load), each file a
// regular file within its bound. A missing resolved.json is
// fs.ErrNotExist (nothing fetched); a missing archive beside it is not
// (an incomplete fetch, notExistIsMissing).
func loadFetched(root, dir string, want manifest.Chart) (*chart.Chart, *chartrepo.Resolved, error) {
	read := func(name string, max int64) ([]byte, error) {
		p, err := manifest.ConfinedPath(root, path.Join(dir, name))
		if err != nil {
			return nil, err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			return nil, fmt.Errorf("%s/%s is not a regular file", dir, name)
		}
		if fi.Size() > max {
			return nil, fmt.Errorf("%s/%s: %w of %d bytes", dir, name, chartrepo.ErrTooLarge, max)
		}
		return os.ReadFile(p)
	}
	raw, err := read(RemoteResolvedFile, 64<<10)
	if err != nil {
		return nil, nil, err
	}
	var r chartrepo.Resolved
	if err := json.Unmarshal(raw, &r); err != nil {
		return nil, nil, fmt.Errorf("%s/%s: %v", dir, RemoteResolvedFile, err)
	}
	if err := CheckResolved(want, &r); err != nil {
		return nil, nil, err
	}
	tgz, err := read(RemoteChartFile, chartrepo.DefaultMaxChartSize)
	if err != nil {
		return nil, nil, notExistIsMissing(err)
	}
	var man []byte
	if chartrepo.IsOCI(r.Repo) {
		if man, err = read(RemoteOCIManifestFile, 4<<20); err != nil {
			return nil, nil, notExistIsMissing(err)
		}
	}
	if err := chartrepo.Verify(r.Digest, tgz, man); err != nil {
		return nil, nil, fmt.Errorf("chart %s %s from %s: %w", r.Name, r.Version, r.Repo, err)
	}
	ch, err := chartrepo.Load(tgz, chartrepo.DefaultMaxUnpacked)
	if err != nil {
		return nil, nil, fmt.Errorf("chart %s %s from %s: %w", r.Name, r.Version, r.Repo, err)
	}
	if ch.Metadata.Name != r.Name || ch.Metadata.Version != r.Version {
		return nil, nil, fmt.Errorf("chart %s %s from %s: the archive holds chart %s %s", r.Name, r.Version, r.Repo, ch.Metadata.Name, ch.Metadata.Version)
	}
	return ch, &r, nil
}

// notExistIsMissing keeps a missing archive next to a resolved.json from
// reading as "not fetched".
func notExistIsMissing(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("incomplete fetched chart: %s", strings.TrimPrefix(unwrapPathError(err).Error(), "open "))
	}
	return err
}

// inflate returns the kustomization data of the file fileAbs with its
// helmCharts entries rendered: each entry's chart (fetched into the
// content) is rendered with the Helm SDK as `helm template` would, into a
// file only this file system holds, and the entry is replaced by that
// file in resources. Data without helmCharts is returned as it is.
func (c confinedFS) inflate(data []byte, fileAbs string) ([]byte, error) {
	dirAbs := filepath.Dir(fileAbs)
	dir, file := c.rel(dirAbs), c.rel(fileAbs)
	charts, err := manifest.HelmChartsOf(data, dir, file)
	if err != nil {
		return nil, err
	}
	if len(charts) == 0 {
		return data, nil
	}
	var added []string
	for i, h := range charts {
		out, err := c.renderHelmChart(h)
		if err != nil {
			return nil, fmt.Errorf("helmCharts %s: %w", h, err)
		}
		name := fmt.Sprintf("%s%d.yaml", inflatedPrefix, i)
		c.virtual[filepath.Join(dirAbs, name)] = out
		added = append(added, name)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, err
	}
	m := root.Content[0]
	var resources *yaml.Node
	for i := 0; i+1 < len(m.Content); {
		switch m.Content[i].Value {
		case "helmCharts":
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			continue
		case "resources":
			resources = m.Content[i+1]
		}
		i += 2
	}
	if resources == nil || resources.Kind != yaml.SequenceNode {
		if resources != nil && resources.Tag != "!!null" {
			return nil, errors.New("resources must be a list")
		}
		resources = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: "resources"}, resources)
	}
	for _, name := range added {
		resources.Content = append(resources.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: name})
	}
	return yaml.Marshal(&root)
}

// renderHelmChart renders the fetched chart of h as `helm template` with
// the entry's release name, namespace ("default" when unset), values,
// Kubernetes and API versions: the manifests (CRDs first with
// includeCRDs), then the hooks unless skipHooks (test hooks unless
// skipTests).
func (c confinedFS) renderHelmChart(h manifest.HelmChart) ([]byte, error) {
	ch, _, err := KustomizeChart(c.root, h)
	if err != nil {
		return nil, err
	}
	vals, err := c.helmValues(h)
	if err != nil {
		return nil, err
	}
	ns := h.Namespace
	if ns == "" {
		ns = "default"
	}
	inst, err := helmcheck.NewClientOnlyInstall(helmcheck.Options{ReleaseName: h.ReleaseName, Namespace: ns, KubeVersion: h.KubeVersion, APIVersions: h.APIVersions}, nil)
	if err != nil {
		return nil, err
	}
	inst.IncludeCRDs = h.IncludeCRDs
	rel, err := helmcheck.RunWithTimeout(context.Background(), inst, ch, vals, helmcheck.DefaultTimeout)
	if err != nil {
		return nil, fmt.Errorf("render: %s", scrubHelm(err))
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	if !h.SkipHooks {
		for _, hk := range rel.Hooks {
			if h.SkipTests && isTestHook(hk) {
				continue
			}
			fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", hk.Path, hk.Manifest)
		}
	}
	if b.Len() > maxTotalSize {
		return nil, fmt.Errorf("the rendered chart is larger than %d bytes", maxTotalSize)
	}
	return []byte(b.String()), nil
}

func isTestHook(h *release.Hook) bool {
	for _, e := range h.Events {
		if e == release.HookTest {
			return true
		}
	}
	return false
}

// scrubHelm keeps the first line of a Helm error.
func scrubHelm(err error) string {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	return msg
}

// helmValues combines an entry's values as Kustomize does: valuesFile
// with valuesInline (override: inline wins; merge: the file wins;
// replace: inline alone), then each additionalValuesFile on top. The
// chart's own values.yaml lies under all of them, as with helm.
func (c confinedFS) helmValues(h manifest.HelmChart) (map[string]any, error) {
	read := func(rel string) (map[string]any, error) {
		data, err := c.ReadFile(filepath.Join(c.root, filepath.FromSlash(rel)))
		if err != nil {
			return nil, fmt.Errorf("values file %s: %v", rel, err)
		}
		v, err := chartutil.ReadValues(data)
		if err != nil {
			return nil, fmt.Errorf("values file %s: %v", rel, err)
		}
		return map[string]any(v), nil
	}
	vals := map[string]any{}
	if h.ValuesFile != "" {
		v, err := read(h.ValuesFile)
		if err != nil {
			return nil, err
		}
		vals = v
	}
	if len(h.ValuesInline) > 0 {
		inline, err := normalize(h.ValuesInline)
		if err != nil {
			return nil, fmt.Errorf("valuesInline: %v", err)
		}
		switch h.ValuesMerge {
		case "replace":
			vals = inline
		case "merge":
			vals = mergeValues(inline, vals)
		default:
			vals = mergeValues(vals, inline)
		}
	}
	for _, f := range h.AdditionalValuesFiles {
		v, err := read(f)
		if err != nil {
			return nil, err
		}
		vals = mergeValues(vals, v)
	}
	return vals, nil
}

// normalize gives inline values the types values files get (JSON's).
func normalize(v map[string]any) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	vals, err := chartutil.ReadValues(b)
	return map[string]any(vals), err
}

// mergeValues merges b over a as helm merges values files: maps deeply,
// everything else replaced.
func mergeValues(a, b map[string]any) map[string]any {
	out := make(map[string]any, len(a))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		if bm, ok := v.(map[string]any); ok {
			if am, ok := out[k].(map[string]any); ok {
				out[k] = mergeValues(am, bm)
				continue
			}
		}
		out[k] = v
	}
	return out
}
