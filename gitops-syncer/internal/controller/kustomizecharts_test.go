package controller_test

import (
	"context"
	"fmt"
	"path"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// inflatedService writes service name whose staging overlay inflates
// chart "web" of repoURL at version with Kustomize's helmCharts.
func inflatedService(r *gittest.Repo, name, repoURL, version string) {
	r.WriteFile("services/"+name+"/service.yaml", fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: %s
environments:
  - name: staging
    namespace: %s-staging
    kustomize: {path: overlay}
    approval: {required: 1, autoApproveRisk: low}
`, name, name))
	r.WriteFile("services/"+name+"/overlay/kustomization.yaml", fmt.Sprintf(`namePrefix: staging-
helmCharts:
  - name: web
    repo: %s
    version: %q
    releaseName: cache
    valuesInline: {greeting: inline}
`, repoURL, version))
}

// inflatedChart returns the chart files of the artifact for the entry.
func inflatedChart(t *testing.T, files map[string][]byte, entry manifest.HelmChart) (tgz, man []byte) {
	t.Helper()
	tgz, ok := files[path.Join(entry.Root(), sources.RemoteChartFile)]
	require.True(t, ok, "the artifact holds the chart of the helmCharts entry: %v", keys(files))
	return tgz, files[path.Join(entry.Root(), sources.RemoteOCIManifestFile)]
}

// TestSync_aHelmChartOfAnOverlayIsPinnedIntoTheArtifactAndReResolvedWithoutAPush:
// a kustomization's helmCharts entry from a registry the Repository lists
// is resolved like a service's chart, recorded on the ChangeRequest and
// fetched by digest into its artifact; a tag moved in the registry is a
// new change at the same commit and leaves the first change's artifact
// (what was approved) as it was; a new version in the range is a change
// without a push. An entry from a registry the Repository does not list
// is not fetched and fails with the kustomization's file and line.
func TestSync_aHelmChartOfAnOverlayIsPinnedIntoTheArtifactAndReResolvedWithoutAPush(t *testing.T) {
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChartSaying(t, "1.1.0", "first")
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	inflatedService(fixture, "shop", reg.repoURL(), "~1.1")
	inflatedService(fixture, "other", "oci://registry.invalid/charts", "1.0.0")
	head := fixture.Commit("overlays inflating charts", "alice@example.com")
	startSyncer(t, ns, "", chartsFrom(reg))
	pushed := reg.requests.Load()
	start := time.Now()
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass))

	waitHandled(t, repo, requestReconcile(t, repo))
	t.Logf("FIGURE: first sync of an overlay inflating a chart from the OCI registry (range ~1.1, basic auth): %d registry requests, %s to the ChangeRequests (validation included)",
		reg.requests.Load()-pushed, time.Since(start).Round(time.Millisecond))
	crs := changeRequests(t, ns)
	first, ok := crs[sluicev1.ChangeRequestName("shop-staging", head, 1)]
	require.True(t, ok, "a ChangeRequest for the overlay: %v", keys(crs))
	assert.NotEqual(t, sluicev1.VerdictFail, first.Spec.Verdict.Result, "%+v", first.Spec.Verdict.Findings)
	require.Len(t, first.Spec.Source.HelmCharts, 1)
	rec := first.Spec.Source.HelmCharts[0]
	assert.Equal(t, reg.repoURL(), rec.Repo)
	assert.Equal(t, "1.1.0", rec.Version)
	require.NotEmpty(t, rec.Digest)
	entry := manifest.HelmChart{Repo: reg.repoURL(), Name: "web", Version: "~1.1"}
	tgz, man := inflatedChart(t, artifactFiles(t, first), entry)
	require.NoError(t, chartrepo.Verify(string(rec.Digest), tgz, man), "the artifact carries the resolved bytes")
	assert.NotEmpty(t, first.Spec.ManifestDigest)

	other, ok := crs[sluicev1.ChangeRequestName("other-staging", head, 1)]
	require.True(t, ok, "a ChangeRequest for the overlay of a registry not listed: %v", keys(crs))
	assert.Equal(t, sluicev1.VerdictFail, other.Spec.Verdict.Result)
	assert.True(t, findingSays(other.Spec.Verdict.Findings, "services/other/overlay/kustomization.yaml", "spec.chartRepositories"), "%+v", other.Spec.Verdict.Findings)
	assert.Empty(t, other.Spec.Source.HelmCharts)

	// Nothing new: no change, and the registry is asked only what the
	// range resolves to.
	before := reg.requests.Load()
	waitHandled(t, repo, requestReconcile(t, repo))
	resync := reg.requests.Load() - before
	t.Logf("FIGURE: re-sync of an unchanged helmCharts range ~1.1 made %d registry requests", resync)
	assert.LessOrEqual(t, resync, int64(2), "the tag list and the chosen tag's digest; nothing fetched")
	assert.Len(t, changeRequests(t, ns), 2)

	// The tag 1.1.0 moved to other bytes: a new change at the same
	// commit, with its own digest; the first change's record is what it
	// was (the operator checks the artifact against it).
	reg.pushChartSaying(t, "1.1.0", "moved")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	moved, ok := crs[sluicev1.ChangeRequestName("shop-staging", head, 2)]
	require.True(t, ok, "a moved tag is a change to approve: %v", keys(crs))
	assert.NotEqual(t, rec.Digest, moved.Spec.Source.HelmCharts[0].Digest)
	assert.NotEqual(t, first.Spec.ApprovalDigest, moved.Spec.ApprovalDigest)
	again := changeRequests(t, ns)[first.Name]
	assert.Equal(t, first.Spec.ApprovalDigest, again.Spec.ApprovalDigest)
	assert.Equal(t, first.Spec.Artifact, again.Spec.Artifact, "the approved change still names the artifact (sha256) with the approved bytes")
	// ... and its URL still serves those bytes: the second change's
	// artifact at the same commit is stored beside it, not over it.
	_, served := download(t, first.Spec.Artifact.URL)
	assert.Equal(t, string(first.Spec.Artifact.SHA256), served, "the first change's artifact was replaced by the second's")
	assert.NotEqual(t, first.Spec.Artifact.URL, moved.Spec.Artifact.URL)

	// 1.1.1 is in the range: a change without a push, whose review shows
	// the inflated chart's version against the applied one.
	markAppliedIn(t, ns, first, "shop-staging")
	reg.pushChartSaying(t, "1.1.1", "newer")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	newer, ok := crs[sluicev1.ChangeRequestName("shop-staging", head, 3)]
	require.True(t, ok, "a new version in the range: %v", keys(crs))
	assert.Equal(t, "1.1.1", newer.Spec.Source.HelmCharts[0].Version)
	assert.NotEqual(t, sluicev1.VerdictFail, newer.Spec.Verdict.Result, "%+v", newer.Spec.Verdict.Findings)
	cm := &corev1.ConfigMap{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: review.ConfigMapName(newer.Name)}, cm))
	sec, _, err := review.FromConfigMap(cm, &newer)
	require.NoError(t, err)
	require.Len(t, sec.HelmCharts, 1)
	assert.Contains(t, sec.HelmCharts[0].Line(), "web 1.1.0 → 1.1.1 from "+reg.repoURL())
}

// TestRollback_anOverlayWithARemoteBaseAndAnInflatedChartIsRebuiltFromWhatTheVerifiedChangeFetched:
// the rollback of an overlay naming a remote base and inflating a chart
// rebuilds the verified revision with the base fetched again at its
// pinned commit and the chart fetched by the digest the verified change
// recorded (not the newer version the range resolves to now): exactly the
// verified content, so the rollback is built rather than declined.
func TestRollback_anOverlayWithARemoteBaseAndAnInflatedChartIsRebuiltFromWhatTheVerifiedChangeFetched(t *testing.T) {
	ns := newNamespace(t)
	platform := gittest.NewRepo(t, t.TempDir(), "platform")
	platform.WriteFile("web/kustomization.yaml", "resources: [config.yaml]\n")
	platform.WriteFile("web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: pinned\n")
	pinned := platform.Commit("bases", "platform@example.com")
	reg := newChartRegistry(t)
	reg.pushChartSaying(t, "1.1.0", "verified")

	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	inflatedService(fixture, "shop", reg.repoURL(), "~1.1")
	overlay := func(greeting string) {
		fixture.WriteFile("services/shop/overlay/kustomization.yaml", fmt.Sprintf(`namePrefix: staging-
resources:
  - %s//web?ref=%s
configMapGenerator:
  - name: greeting
    literals: [greeting=%s]
helmCharts:
  - name: web
    repo: %s
    version: "~1.1"
    releaseName: cache
`, platform.FileURL(), pinned, greeting, reg.repoURL()))
	}
	overlay("one")
	first := fixture.Commit("shop one", "alice@example.com")
	startSyncer(t, ns, "", chartsFrom(reg))
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass), func(r *sluicev1.Repository) {
		r.Spec.KustomizeRemoteBases = []sluicev1.KustomizeRemoteBase{{URL: platform.FileURL()}}
	})
	waitHandled(t, repo, requestReconcile(t, repo))
	v1, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", first, 1)]
	require.True(t, ok)
	require.NotEqual(t, sluicev1.VerdictFail, v1.Spec.Verdict.Result, "%+v", v1.Spec.Verdict.Findings)
	require.Len(t, v1.Spec.Source.HelmCharts, 1)
	markAppliedIn(t, ns, v1, "shop-staging")
	setPhase(t, &v1, sluicev1.PhaseVerified)

	// A newer chart in the range and a push: v2, which fails verification.
	reg.pushChartSaying(t, "1.1.1", "failing")
	overlay("two")
	second := fixture.Commit("shop two", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	v2, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", second, 1)]
	require.True(t, ok, "%v", keys(changeRequests(t, ns)))
	require.Equal(t, "1.1.1", v2.Spec.Source.HelmCharts[0].Version)
	markAppliedIn(t, ns, v2, "shop-staging")
	setPhase(t, &v2, sluicev1.PhaseVerificationFailed)

	askRollback(t, ns, "shop-staging", v2.Name, v1.Name)
	name := sluicev1.RollbackChangeRequestName("shop-staging", v2.Name, 1)
	var rb sluicev1.ChangeRequest
	if !assert.Eventually(t, func() bool {
		var ok bool
		rb, ok = changeRequests(t, ns)[name]
		return ok
	}, 2*time.Minute, 50*time.Millisecond, "no rollback ChangeRequest %s", name) {
		t.Fatalf("RolledBack: %+v", meta.FindStatusCondition(getRelease(t, ns, "shop-staging").Status.Conditions, sluicev1.ConditionRolledBack))
	}
	require.Equal(t, v1.Spec.ContentDigest, rb.Spec.ContentDigest)
	require.Equal(t, v1.Spec.ManifestDigest, rb.Spec.ManifestDigest)
	require.Equal(t, v1.Spec.Source.HelmCharts, rb.Spec.Source.HelmCharts, "the verified chart by its digest, not the range's newest")
}
