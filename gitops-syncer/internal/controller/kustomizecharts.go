package controller

import (
	"context"
	"fmt"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// fetchedKChart is the chart fetched for a Kustomize helmCharts entry.
type fetchedKChart struct {
	entry manifest.HelmChart
	chart *chartrepo.Chart
}

// kustomizeChartAllowed reports whether the Repository lets overlays
// inflate charts from the chart repository u: a spec.chartRepositories
// entry covers it.
func kustomizeChartAllowed(repo *sluicev1.Repository, u string) bool {
	return chartRepository(repo, u, func(*sluicev1.ChartRepository) bool { return true }) != nil
}

// kustomizeCharts resolves and fetches the charts of a release overlay's
// helmCharts entries exactly as a service's chart from a chart repository
// (remoteChart): the version or range to one digest, fetched by it, its
// signature verified where the Repository asks. An entry whose repository
// the Repository does not list in spec.chartRepositories is not fetched,
// so the validation refuses it with the kustomization's file and line. A
// chart that cannot be had is a chartError: the release proposes nothing
// and the others go on.
func (r *RepositoryReconciler) kustomizeCharts(ctx context.Context, repo *sluicev1.Repository, entries []manifest.HelmChart) ([]fetchedKChart, error) {
	var out []fetchedKChart
	seen := map[string]bool{}
	for _, h := range entries {
		if seen[h.Key()] || !kustomizeChartAllowed(repo, h.Repo) {
			continue
		}
		seen[h.Key()] = true
		c, err := r.resolveChart(ctx, repo, chartrepo.Ref{Repo: h.Repo, Name: h.Name, Version: h.Version})
		if err != nil {
			return nil, err
		}
		out = append(out, fetchedKChart{entry: h, chart: c})
	}
	return out, nil
}

// kustomizeChartsByDigest fetches again (or takes from the cache) the
// charts a change recorded for the helmCharts entries of its overlay, by
// their digests: each entry takes the recorded chart of its repository and
// name whose version is in the entry's range. An entry with no recorded
// chart is left out (its build refuses it, as the change's did).
func (r *RepositoryReconciler) kustomizeChartsByDigest(ctx context.Context, repo *sluicev1.Repository, entries []manifest.HelmChart, recorded []sluicev1.ChartSource) ([]fetchedKChart, error) {
	var out []fetchedKChart
	seen := map[string]bool{}
	for _, h := range entries {
		if seen[h.Key()] {
			continue
		}
		seen[h.Key()] = true
		rec, ok := recordedFor(h, recorded)
		if !ok {
			continue
		}
		c, err := r.chartByDigest(ctx, repo, rec)
		if err != nil {
			return nil, err
		}
		out = append(out, fetchedKChart{entry: h, chart: c})
	}
	return out, nil
}

// recordedFor is the recorded chart an entry resolved to.
func recordedFor(h manifest.HelmChart, recorded []sluicev1.ChartSource) (sluicev1.ChartSource, bool) {
	want := manifest.Chart{Repo: h.Repo, Name: h.Name, Version: h.Version}
	for _, c := range recorded {
		if c.Digest != "" && sources.CheckResolved(want, &chartrepo.Resolved{Repo: c.Repo, Name: c.Name, Version: c.Version}) == nil {
			return c, true
		}
	}
	return sluicev1.ChartSource{}, false
}

// kustomizeChartFiles are the artifact files of the fetched charts (under
// manifest.KustomizeChartsDir) and the roots to add to its inputs.
func kustomizeChartFiles(kcharts []fetchedKChart) (map[string][]byte, []string, error) {
	files := map[string][]byte{}
	var roots []string
	for _, k := range kcharts {
		f, err := sources.KustomizeChartFiles(k.entry, k.chart)
		if err != nil {
			return nil, nil, fmt.Errorf("helmCharts %s: %w", k.entry, err)
		}
		for name, data := range f {
			files[name] = data
		}
		roots = append(roots, k.entry.Root())
	}
	return files, roots, nil
}

// kustomizeChartsTree folds the fetched charts' digests into a release's
// input hash: a new version in an entry's range (or a moved tag) is a
// change without a git push, and an unchanged one is not.
func kustomizeChartsTree(tree string, kcharts []fetchedKChart) string {
	for _, k := range kcharts {
		tree = chartTree(tree, k.chart)
	}
	return tree
}

// recordKustomizeCharts records the fetched charts in a change's source.
func recordKustomizeCharts(src *sluicev1.ChangeSource, kcharts []fetchedKChart) {
	if src == nil {
		return
	}
	src.HelmCharts = nil
	for _, k := range kcharts {
		c := k.chart
		src.HelmCharts = append(src.HelmCharts, sluicev1.ChartSource{Repo: c.Repo, Name: c.Name, Version: c.Version, Digest: sluicev1.Digest(c.Digest)})
	}
}
