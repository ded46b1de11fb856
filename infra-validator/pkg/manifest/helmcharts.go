package manifest

// Helm charts inflated by Kustomize (a kustomization's helmCharts). They
// are treated like a service's chart from a chart repository: the syncer
// resolves each entry's version or range to one digest, from a repository
// the Repository lists in spec.chartRepositories only, and fetches the
// chart by that digest into the artifact under KustomizeChartsDir, where
// every build (validator, Helm applier, Argo CD plugin) renders it with
// the Helm SDK. No build ever runs helm or reaches the network, and the
// chart's bytes are in the contentDigest.

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path"
	"strings"

	"github.com/Masterminds/semver/v3"
	yaml "go.yaml.in/yaml/v3"
)

// KustomizeChartsDir is the folder of an artifact holding the charts the
// syncer fetched for helmCharts entries: KustomizeChartsDir/<HelmChart.Key()>/
// holds resolved.json, chart.tgz and, for OCI, oci-manifest.json (the
// files of a service's fetched chart). A repository holding this folder
// itself is refused by the syncer.
const KustomizeChartsDir = ".sluice/kustomize-charts"

// HelmChart is one helmCharts entry of a kustomization, its paths made
// repository-relative.
type HelmChart struct {
	// Name, Repo and Version name the chart as `chart: {repo}` does:
	// Version is an exact version or a semver range.
	Name    string `yaml:"name" json:"name"`
	Repo    string `yaml:"repo" json:"repo"`
	Version string `yaml:"version" json:"version"`
	// ReleaseName and Namespace are what the chart renders as.
	ReleaseName string `yaml:"releaseName" json:"releaseName"`
	Namespace   string `yaml:"namespace" json:"namespace,omitempty"`
	// ValuesFile and AdditionalValuesFiles are repository paths (the
	// kustomization names them relative to its folder).
	ValuesFile            string   `yaml:"valuesFile" json:"valuesFile,omitempty"`
	AdditionalValuesFiles []string `yaml:"additionalValuesFiles" json:"additionalValuesFiles,omitempty"`
	// ValuesInline and ValuesMerge (override, the default, merge or
	// replace) combine with ValuesFile as Kustomize does.
	ValuesInline map[string]any `yaml:"valuesInline" json:"valuesInline,omitempty"`
	ValuesMerge  string         `yaml:"valuesMerge" json:"valuesMerge,omitempty"`
	IncludeCRDs  bool           `yaml:"includeCRDs" json:"includeCRDs,omitempty"`
	SkipHooks    bool           `yaml:"skipHooks" json:"skipHooks,omitempty"`
	SkipTests    bool           `yaml:"skipTests" json:"skipTests,omitempty"`
	APIVersions  []string       `yaml:"apiVersions" json:"apiVersions,omitempty"`
	KubeVersion  string         `yaml:"kubeVersion" json:"kubeVersion,omitempty"`
}

// helmChartFields are the helmCharts keys Sluice renders; the others
// (nameTemplate, debug, devel) are refused.
var helmChartFields = map[string]bool{
	"name": true, "repo": true, "version": true, "releaseName": true, "namespace": true,
	"valuesFile": true, "additionalValuesFiles": true, "valuesInline": true, "valuesMerge": true,
	"includeCRDs": true, "skipHooks": true, "skipTests": true, "apiVersions": true, "kubeVersion": true,
}

// Key names the entry's fetched chart inside KustomizeChartsDir: the
// repository, chart and version (or range) as written.
func (h HelmChart) Key() string {
	s := sha256.Sum256([]byte(h.Repo + "\n" + h.Name + "\n" + h.Version))
	return hex.EncodeToString(s[:12])
}

// Root is the repo-relative folder of the entry's fetched chart.
func (h HelmChart) Root() string { return path.Join(KustomizeChartsDir, h.Key()) }

// HelmChartRef is a helmCharts entry and where it is written.
type HelmChartRef struct {
	HelmChart
	// At is the kustomization file and line of the entry.
	At Problem
}

// KustomizeHelmCharts lists the helmCharts entries of the overlay in dir
// and of the kustomizations it reaches (with where), walking what it can:
// what the syncer must resolve and fetch before the overlay builds.
func KustomizeHelmCharts(repoRoot, dir string) []HelmChartRef {
	dir, err := cleanDir(dir)
	if err != nil {
		return nil
	}
	w := &kwalk{repoRoot: repoRoot, seen: map[string]bool{}}
	w.visit(dir, Problem{File: dir})
	return w.charts
}

// HelmChartsOf parses the helmCharts entries of kustomization data in the
// repo-relative folder dir without checking the files they name: what a
// build renders in place of each entry, in order.
func HelmChartsOf(data []byte, dir, file string) ([]HelmChart, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil || len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, nil
	}
	w := &kwalk{seen: map[string]bool{}}
	var out []HelmChart
	m := root.Content[0]
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value != "helmCharts" {
			continue
		}
		for _, item := range w.items(file, "helmCharts", m.Content[i+1]) {
			h, ok := w.helmChart(dir, file, item, false)
			if ok {
				out = append(out, h)
			}
		}
	}
	if len(w.problems) > 0 {
		return nil, &Error{Problems: w.problems}
	}
	return out, nil
}

// helmChart checks one helmCharts entry of the kustomization file in dir
// and returns it with repository paths; with walk set, the files it names
// are checked (confined, existing) and recorded as inputs, and the fetched
// chart must be in the content.
func (w *kwalk) helmChart(dir, file string, item *yaml.Node, walk bool) (HelmChart, bool) {
	at := Problem{File: file, Line: item.Line}
	n := len(w.problems)
	for i := 0; i+1 < len(item.Content); i += 2 {
		if k := item.Content[i]; !helmChartFields[k.Value] {
			w.fail(Problem{File: file, Line: k.Line}, "helmCharts: field %q is not supported (Sluice renders name, repo, version, releaseName, namespace, valuesFile, additionalValuesFiles, valuesInline, valuesMerge, includeCRDs, skipHooks, skipTests, apiVersions, kubeVersion)", k.Value)
		}
	}
	var h HelmChart
	if err := item.Decode(&h); err != nil {
		w.fail(at, "helmCharts: %v", strings.TrimPrefix(err.Error(), "yaml: "))
		return h, false
	}
	line := func(key string) Problem {
		if f := fieldKey(item, key); f != nil {
			return Problem{File: file, Line: f.Line}
		}
		return at
	}
	switch {
	case h.Name == "":
		w.fail(at, "helmCharts: name is required")
	case len(h.Name) > 253 || strings.ContainsAny(h.Name, "/\\ \t\n") || strings.HasPrefix(h.Name, "-") || h.Name == "." || h.Name == "..":
		w.fail(line("name"), "helmCharts: name %q must be a chart name (no '/', no leading '-')", h.Name)
	}
	switch {
	case h.Repo == "":
		w.fail(at, "helmCharts %s: repo is required (https:// or oci://): Sluice inflates charts from chart repositories only, never from a chartHome folder", h.Name)
	case !strings.HasPrefix(h.Repo, "https://") && !strings.HasPrefix(h.Repo, "oci://"):
		w.fail(line("repo"), "helmCharts %s: repo %q must start with https:// or oci://", h.Name, h.Repo)
	case strings.Contains(strings.SplitN(h.Repo, "/", 4)[2], "@"):
		w.fail(line("repo"), "helmCharts %s: repo must not carry credentials (the Repository's spec.chartRepositories names them)", h.Name)
	}
	if h.Version == "" {
		w.fail(at, "helmCharts %s: version is required (an exact version or a semver range): without one the chart would move without a change", h.Name)
	} else if _, err := semver.NewConstraint(h.Version); err != nil || len(h.Version) > 64 {
		w.fail(line("version"), "helmCharts %s: version %q must be a version or a semver range (e.g. 1.2.3, ~1.2)", h.Name, h.Version)
	}
	switch {
	case h.ReleaseName == "":
		w.fail(at, "helmCharts %s: releaseName is required (a generated name would differ on every build)", h.Name)
	case len(h.ReleaseName) > 53 || !dnsLabel.MatchString(h.ReleaseName):
		w.fail(line("releaseName"), "helmCharts %s: releaseName %q must be a DNS label of at most 53 characters", h.Name, h.ReleaseName)
	}
	if h.Namespace != "" && (len(h.Namespace) > 63 || !dnsLabel.MatchString(h.Namespace)) {
		w.fail(line("namespace"), "helmCharts %s: namespace %q must be a DNS label", h.Name, h.Namespace)
	}
	switch h.ValuesMerge {
	case "", "override", "merge", "replace":
	default:
		w.fail(line("valuesMerge"), "helmCharts %s: valuesMerge %q must be override, merge or replace", h.Name, h.ValuesMerge)
	}
	if len(h.AdditionalValuesFiles) > MaxValuesFiles {
		w.fail(line("additionalValuesFiles"), "helmCharts %s: at most %d additionalValuesFiles", h.Name, MaxValuesFiles)
	}
	if remoteRoot(dir) != "" {
		w.fail(at, "helmCharts %s: a remote base's helmCharts are not fetched; inflate the chart in the repository's own overlay", h.Name)
	}
	if len(w.problems) > n {
		return h, false
	}
	// Values files are the repository's, resolved as Kustomize does
	// (relative to the kustomization's folder), and confined to it.
	var files []*yaml.Node
	if v := field(item, "valuesFile"); v != nil {
		h.ValuesFile = path.Clean(path.Join(dir, v.Value))
		files = append(files, v)
	}
	if f := field(item, "additionalValuesFiles"); f != nil {
		h.AdditionalValuesFiles = nil
		for _, e := range w.strings(file, "helmCharts.additionalValuesFiles", f) {
			h.AdditionalValuesFiles = append(h.AdditionalValuesFiles, path.Clean(path.Join(dir, e.Value)))
			files = append(files, e)
		}
	}
	if !walk {
		return h, true
	}
	// Recorded before the files are checked: the syncer fetches what the
	// entry names even where the walk of a partial tree stops.
	w.charts = append(w.charts, HelmChartRef{HelmChart: h, At: at})
	ok := true
	for _, f := range files {
		if _, fine := w.ref(dir, f, Problem{File: file, Line: f.Line}, false, true); !fine {
			ok = false
		}
	}
	if _, err := ConfinedPath(w.repoRoot, path.Join(h.Root(), "resolved.json")); err != nil {
		w.fail(at, "helmCharts %s is refused: it is not fetched (the Repository does not allow charts from %s: spec.chartRepositories)", h, h.Repo)
		return h, false
	}
	w.inputs = append(w.inputs, h.Root())
	return h, ok
}

// fieldKey returns the key node of key in mapping n.
func fieldKey(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i]
		}
	}
	return nil
}

// helmChartString is an entry in messages: "name version from repo".
func (h HelmChart) String() string {
	return fmt.Sprintf("%s %s from %s", h.Name, h.Version, h.Repo)
}
