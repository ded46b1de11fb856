package controller

import (
	"context"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// maxRememberedBytes bounds the rendered manifests kept in memory; past it
// they are forgotten (and rendered again from git when needed).
const maxRememberedBytes = 64 << 20

// renderedManifest is the Helm manifest a release rendered at a revision.
type renderedManifest struct {
	revision string
	manifest string
}

// previousRevision is the revision a change of rel is rated against: the
// last applied revision, what is live; "" when nothing was applied, so
// every object is new. The last synced revision is never the base: it may
// hold a change nobody approved, and rating against it would hide that
// change (a ClusterRoleBinding pushed, then pushed again with an image
// bump, would look like an image bump).
func previousRevision(rel *sluicev1.Release) string {
	return rel.Status.AppliedRevision
}

// previousFor describes the release of plan at its last applied revision
// for the validator: the manifest remembered from validating that revision, or
// its service and chart folders extracted from the local git cache into
// dir (an empty folder; changespec.ExtractRelease). The folder and environment are the applied
// change's (its spec.source), not the Release's spec, which holds the newest
// recorded change: rating against a folder an unapplied push moved to would
// rate against the wrong thing. It never fails: a previous revision that
// cannot be read is reported in Previous.Err and rated by the validator.
func (r *RepositoryReconciler) previousFor(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, plan *changePlan, dir string) *validation.Previous {
	rev := previousRevision(plan.release)
	if rev == "" {
		return nil
	}
	prev := &validation.Previous{Revision: rev}
	if m, ok := r.rememberedManifest(types.NamespacedName{Namespace: plan.release.Namespace, Name: plan.release.Name}, rev); ok {
		prev.Manifest = m
		return prev
	}
	svcDir, service, env := string(plan.release.Spec.SourcePath), plan.release.Spec.Service, plan.env
	applied, err := r.recordedChange(ctx, plan.release, plan.release.Status.AppliedChange)
	if err != nil {
		prev.Err = err
		return prev
	}
	if applied != nil && applied.Spec.Source != nil {
		src := applied.Spec.Source
		svcDir, service, env = string(src.Path), src.Service, string(src.Environment)
	}
	svc, err := changespec.ExtractRelease(cache, rev, svcDir, service, env, dir)
	if err != nil {
		prev.Err = err
		return prev
	}
	if applied != nil && applied.Spec.Source != nil && applied.Spec.Source.Chart.Digest != "" {
		// The applied chart from a chart repository, by its digest.
		if err := r.writeChart(ctx, repo, applied.Spec.Source.Chart, dir); err != nil {
			prev.Err = err
			return prev
		}
	}
	if applied != nil && applied.Spec.Source != nil && len(applied.Spec.Source.HelmCharts) > 0 {
		// The applied charts of the overlay's helmCharts, by their digests.
		if err := r.writeKustomizeCharts(ctx, repo, svc, env, applied.Spec.Source.HelmCharts, dir); err != nil {
			prev.Err = err
			return prev
		}
	}
	prev.RepoRoot, prev.Service = dir, svc
	return prev
}

// writeKustomizeCharts writes the charts recorded for the helmCharts
// entries of svc's overlay in env (fetched by their digests, or from the
// cache) into the content folder dir, where the build reads them.
func (r *RepositoryReconciler) writeKustomizeCharts(ctx context.Context, repo *sluicev1.Repository, svc *manifest.Service, env string, recorded []sluicev1.ChartSource, dir string) error {
	var entries []manifest.HelmChart
	if d := svc.KustomizeDir(env); d != "" {
		for _, h := range manifest.KustomizeHelmCharts(dir, d) {
			entries = append(entries, h.HelmChart)
		}
	}
	kcharts, err := r.kustomizeChartsByDigest(ctx, repo, entries, recorded)
	if err != nil {
		return err
	}
	files, _, err := kustomizeChartFiles(kcharts)
	if err != nil {
		return err
	}
	return writeFiles(dir, files)
}

// writeFiles writes files (by content path) under dir.
func writeFiles(dir string, files map[string][]byte) error {
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeChart writes the chart c names (fetched by its digest, or from
// the cache) into the content folder dir, where the validator reads it.
func (r *RepositoryReconciler) writeChart(ctx context.Context, repo *sluicev1.Repository, c sluicev1.ChartSource, dir string) error {
	ch, err := r.chartByDigest(ctx, repo, c)
	if err != nil {
		return err
	}
	files, err := sources.RemoteChartFiles(ch)
	if err != nil {
		return err
	}
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// rememberedManifest returns the manifest the release rendered at rev, if
// this process validated that revision.
func (r *RepositoryReconciler) rememberedManifest(key types.NamespacedName, rev string) (string, bool) {
	r.memoMu.Lock()
	defer r.memoMu.Unlock()
	m, ok := r.manifests[key]
	if !ok || m.revision != rev {
		return "", false
	}
	return m.manifest, true
}

// rememberManifest keeps the manifest the release rendered at rev, the
// previous manifest of its next change. Renders are deterministic, so a
// forgotten one is rendered again from git with the same result.
func (r *RepositoryReconciler) rememberManifest(key types.NamespacedName, rev, m string) {
	r.memoMu.Lock()
	defer r.memoMu.Unlock()
	if old, ok := r.manifests[key]; ok {
		r.manifestBytes -= len(old.manifest)
	}
	if r.manifests == nil || r.manifestBytes+len(m) > maxRememberedBytes {
		r.manifests, r.manifestBytes = map[types.NamespacedName]renderedManifest{}, 0
	}
	if len(m) > maxRememberedBytes {
		return
	}
	r.manifests[key] = renderedManifest{revision: rev, manifest: m}
	r.manifestBytes += len(m)
}
