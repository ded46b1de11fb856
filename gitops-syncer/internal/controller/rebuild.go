package controller

import (
	"context"
	"fmt"
	"path"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// RebuildArtifact implements artifact.Rebuilder: it rebuilds an artifact
// missing from storage from git, and returns it only when its sha256 is the
// one a ChangeRequest recorded, so nothing unrecorded is ever served.
func (r *RepositoryReconciler) RebuildArtifact(ctx context.Context, k artifact.Key) (*artifact.Artifact, error) {
	var crs sluicev1.ChangeRequestList
	if err := r.APIReader.List(ctx, &crs, client.InNamespace(k.Namespace),
		client.MatchingLabels{sluicev1.LabelRelease: k.Release, sluicev1.LabelRepository: k.Repository}); err != nil {
		return nil, fmt.Errorf("list change requests: %w", err)
	}
	want := map[sluicev1.Digest]bool{}
	// A preview's commit lives on its pull request's ref, not the tracked one.
	refs := []string{}
	// The folders the changes recorded, for an artifact of the manifest alone.
	var dirs []string
	// The charts from chart repositories the changes recorded.
	var charts []sluicev1.ChartSource
	// The charts of helmCharts entries each change recorded.
	var recordedHelmCharts [][]sluicev1.ChartSource
	for _, cr := range crs.Items {
		if cr.Spec.Revision == k.Revision {
			want[cr.Spec.Artifact.SHA256] = true
			if src := cr.Spec.Source; src != nil && src.Chart.Digest != "" {
				charts = append(charts, src.Chart)
			}
			if src := cr.Spec.Source; src != nil {
				dirs = append(dirs, string(src.Path))
				if len(src.HelmCharts) > 0 {
					recordedHelmCharts = append(recordedHelmCharts, src.HelmCharts)
				}
			}
			if pr := cr.Spec.PullRequest; pr != nil {
				refs = append(refs, fmt.Sprintf("refs/pull/%d/head", pr.Number), fmt.Sprintf("refs/merge-requests/%d/head", pr.Number))
			}
		}
	}
	if k.SHA256 != "" {
		// A key with its sha256 names exactly one recorded artifact.
		d := sluicev1.Digest("sha256:" + k.SHA256)
		if !want[d] {
			return nil, artifact.ErrUnknownArtifact
		}
		want = map[sluicev1.Digest]bool{d: true}
	}
	if len(want) == 0 {
		return nil, artifact.ErrUnknownArtifact
	}
	repo := &sluicev1.Repository{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Repository}, repo); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, artifact.ErrUnknownArtifact
		}
		return nil, fmt.Errorf("read repository: %w", err)
	}
	remote, err := r.RemoteFor(ctx, repo)
	if err != nil {
		return nil, err
	}
	cache, err := r.Git.Fetch(ctx, remote, repo.TrackedRef(), k.Revision)
	for _, ref := range refs {
		if err == nil {
			break
		}
		cache, err = r.Git.Fetch(ctx, remote, ref, k.Revision)
	}
	if err != nil {
		return nil, err
	}
	fsys, entries, err := r.servicesAt(cache, repo, k.Revision, "rebuild-")
	if err != nil {
		return nil, err
	}
	// The same input lists planChange could have used, in its order.
	var candidates [][]string
	// The Kustomize remote bases the release's overlay names at this
	// revision, fetched again at their pinned commits.
	var remotes []manifest.RemoteBase
	var helmCharts []manifest.HelmChart
	for _, e := range entries {
		if e.Service != nil {
			for _, env := range e.Service.Environments {
				if sluicev1.ReleaseName(e.Service.Name, sluicev1.EnvironmentName(env.Name)) == k.Release {
					candidates = append(candidates, e.Inputs)
					remotes = append(remotes, e.Releases[env.Name].RemoteBases...)
					helmCharts = append(helmCharts, e.Releases[env.Name].HelmCharts...)
				}
			}
		}
	}
	rel := &sluicev1.Release{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: k.Namespace, Name: k.Release}, rel); err == nil && rel.Spec.SourcePath != "" {
		dirs = append(dirs, string(rel.Spec.SourcePath))
	}
	for _, dir := range dirs {
		candidates = append(candidates, []string{dir}, []string{path.Join(dir, manifest.FileName)})
	}
	// A chart from a chart repository is fetched again by its recorded
	// digest (or taken from the cache); other bytes are refused there.
	fetched := []*chartrepo.Chart{nil}
	for _, c := range charts {
		ch, err := r.chartByDigest(ctx, repo, c)
		if err != nil {
			return nil, fmt.Errorf("artifact %s: %w", k.Path(), err)
		}
		fetched = append(fetched, ch)
	}
	baseSets := [][]fetchedBase{nil}
	if len(remotes) > 0 {
		bases, err := r.remoteBases(ctx, repo, remotes)
		if err != nil {
			return nil, fmt.Errorf("artifact %s: %w", k.Path(), err)
		}
		if len(bases) > 0 {
			baseSets = append(baseSets, bases)
		}
	}
	// The charts of the overlay's helmCharts entries, by the digests the
	// change recorded.
	kchartSets := [][]fetchedKChart{nil}
	for _, recorded := range recordedHelmCharts {
		kcharts, err := r.kustomizeChartsByDigest(ctx, repo, helmCharts, recorded)
		if err != nil {
			return nil, fmt.Errorf("artifact %s: %w", k.Path(), err)
		}
		if len(kcharts) > 0 {
			kchartSets = append(kchartSets, kcharts)
		}
	}
	for _, inputs := range candidates {
		for _, ch := range fetched {
			for _, bases := range baseSets {
				for _, kcharts := range kchartSets {
					cfs, cinputs, err := withFetched(fsys, inputs, ch, bases, kcharts)
					if err != nil {
						continue
					}
					a, err := artifact.Build(cfs, cinputs)
					if err == nil && want[sluicev1.Digest(a.SHA256)] {
						return a, nil
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("artifact %s rebuilt from git does not match the recorded sha256", k.Path())
}
