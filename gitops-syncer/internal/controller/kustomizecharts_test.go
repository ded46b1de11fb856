package controller_test

import (
	"fmt"
	"path"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
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
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass))

	waitHandled(t, repo, requestReconcile(t, repo))
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

	// Nothing new: no change.
	waitHandled(t, repo, requestReconcile(t, repo))
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

	// 1.1.1 is in the range: a change without a push.
	reg.pushChartSaying(t, "1.1.1", "newer")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	newer, ok := crs[sluicev1.ChangeRequestName("shop-staging", head, 3)]
	require.True(t, ok, "a new version in the range: %v", keys(crs))
	assert.Equal(t, "1.1.1", newer.Spec.Source.HelmCharts[0].Version)
	assert.NotEqual(t, sluicev1.VerdictFail, newer.Spec.Verdict.Result, "%+v", newer.Spec.Verdict.Findings)
}
