// Package sources turns the other things a service environment may deploy
// besides a Helm chart, a Kustomize overlay and a folder of plain
// manifests, into a Helm chart, so that they take the same path as charts
// everywhere: the validator renders and checks the chart (policies,
// namespace guards, manifestDigest), and the Helm applier installs it
// through its digest-checking post-renderer, with Helm's release history
// for drift, audit, rollback and uninstall.
//
// The generated chart (GeneratedChart) holds the manifests as chart files
// and one template per source file that prints its file with .Files.Get,
// so Helm's template engine never interprets their content. Its name is
// the service's and its version 0.0.0; the validator and the applier build
// it with the same function from the same approved content, so the bytes
// Helm hands the post-renderer, and so the digest, are the same.
//
// Exported API:
//
//	type File struct{ Path string; Data []byte }
//	func Kustomize(repoRoot, dir string) (File, error)
//	func Manifests(repoRoot, dir string, m manifest.Manifests) ([]File, error)
//	func GeneratedChart(name, description string, files []File) (*chart.Chart, error)
//	func EnvironmentChart(repoRoot string, svc *manifest.Service, env string) (*chart.Chart, error)
//	const TemplatePrefix = "templates/"
//	const RemoteChartDir = ".sluice/chart"  // a fetched chart in the artifact (remote.go)
//	func RemoteChartFiles(c *chartrepo.Chart) (map[string][]byte, error)
//	func RemoteChart(root string, svc *manifest.Service, env string) (*chart.Chart, *chartrepo.Resolved, error)
//	func CheckResolved(c manifest.Chart, r *chartrepo.Resolved) error
//	var ErrRemoteChartMissing
//	func KustomizeChartFiles(h manifest.HelmChart, c *chartrepo.Chart) (map[string][]byte, error)  // inflate.go
//	func KustomizeChart(root string, h manifest.HelmChart) (*chart.Chart, *chartrepo.Resolved, error)
//
// A Kustomize overlay's helmCharts entries are rendered with the Helm SDK
// (as `helm template`) from the charts the syncer fetched into the content
// (manifest.KustomizeChartsDir), checked against their recorded digests,
// and fed to the build in place of each entry; helm never runs and nothing
// is fetched.
package sources

import (
	"errors"
	"fmt"
	"sort"
	"strconv"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// maxFileSize bounds one manifest file and one file a Kustomize build reads.
const maxFileSize = 8 << 20

// maxTotalSize bounds what one environment's generated chart holds.
const maxTotalSize = 64 << 20

// TemplatePrefix starts the name of every template of a generated chart;
// the rest of the name is the repository file it holds (for a Kustomize
// overlay, its kustomization file), so findings can name that file.
const TemplatePrefix = "templates/"

// filesPrefix starts the name of the chart file holding a template's content.
const filesPrefix = "sluice-sources/"

// File is one source file of a generated chart: its repository path and
// the manifests it holds.
type File struct {
	Path string
	Data []byte
}

// GeneratedVersion is the version of every generated chart.
const GeneratedVersion = "0.0.0"

// GeneratedChart wraps files into a Helm chart named name, with one
// template per file whose output is the file as it is.
func GeneratedChart(name, description string, files []File) (*chart.Chart, error) {
	ch := &chart.Chart{
		Metadata: &chart.Metadata{
			APIVersion:  chart.APIVersionV2,
			Name:        name,
			Version:     GeneratedVersion,
			Description: description,
			Type:        "application",
		},
	}
	sorted := append([]File(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	total := 0
	for i, f := range sorted {
		if i > 0 && f.Path == sorted[i-1].Path {
			return nil, fmt.Errorf("file %s is listed twice", f.Path)
		}
		total += len(f.Data)
		if total > maxTotalSize {
			return nil, fmt.Errorf("the manifests are larger than %d bytes", maxTotalSize)
		}
		data := f.Data
		if len(data) > 0 && data[len(data)-1] != '\n' {
			data = append(append([]byte(nil), data...), '\n')
		}
		ch.Files = append(ch.Files, &chart.File{Name: filesPrefix + f.Path, Data: data})
		ch.Templates = append(ch.Templates, &chart.File{
			Name: TemplatePrefix + f.Path,
			Data: []byte("{{ .Files.Get " + strconv.Quote(filesPrefix+f.Path) + " }}"),
		})
	}
	if err := ch.Validate(); err != nil {
		return nil, fmt.Errorf("generated chart: %w", err)
	}
	return ch, nil
}

// ErrNotGenerated is returned by EnvironmentChart for an environment that
// deploys the service's own chart.
var ErrNotGenerated = errors.New("the environment deploys the service's chart")

// EnvironmentChart builds the generated chart of environment env of svc
// from the checkout at repoRoot: its Kustomize overlay's build or its
// manifests folder. Bad input is a *manifest.Error naming the file (and
// line where known).
func EnvironmentChart(repoRoot string, svc *manifest.Service, env string) (*chart.Chart, error) {
	e, ok := svc.Environment(env)
	if !ok {
		return nil, fmt.Errorf("service %s has no environment %q", svc.Name, env)
	}
	var files []File
	var what string
	switch e.Source() {
	case manifest.SourceKustomize:
		dir := svc.KustomizeDir(env)
		f, err := Kustomize(repoRoot, dir)
		if err != nil {
			return nil, err
		}
		files, what = []File{f}, "the Kustomize overlay "+dir
	case manifest.SourceManifests:
		dir := svc.ManifestsDir(env)
		fs, err := Manifests(repoRoot, dir, *e.Manifests)
		if err != nil {
			return nil, err
		}
		files, what = fs, "the manifests in "+dir
	default:
		return nil, ErrNotGenerated
	}
	return GeneratedChart(svc.Name, "Generated by Sluice from "+what, files)
}
