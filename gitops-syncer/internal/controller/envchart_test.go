package controller_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestSync_anEnvironmentsChartVersionOverridesTheServicesRange: staging
// follows the service's range while prod pins its own version in its
// environment entry; each release resolves, records and carries its own
// chart, and a new version in the range changes staging only.
func TestSync_anEnvironmentsChartVersionOverridesTheServicesRange(t *testing.T) {
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChart(t, "1.1.0")
	reg.pushChart(t, "1.1.2")
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	fixture.WriteFile("services/web/service.yaml", fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {repo: %q, name: web, version: "~1.1"}
values: [values.yaml]
environments:
  - name: staging
    namespace: web-staging
  - name: prod
    namespace: web-prod
    chart: {version: 1.1.0}
`, reg.repoURL()))
	fixture.WriteFile("services/web/values.yaml", "greeting: from-git\n")
	head := fixture.Commit("web: staging on the range, prod pinned", "alice@example.com")
	startSyncer(t, ns, "", chartsFrom(reg))
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass))
	waitHandled(t, repo, requestReconcile(t, repo))

	crs := changeRequests(t, ns)
	staging, ok := crs[sluicev1.ChangeRequestName("web-staging", head, 1)]
	require.True(t, ok, "%v", keys(crs))
	prod, ok := crs[sluicev1.ChangeRequestName("web-prod", head, 1)]
	require.True(t, ok, "%v", keys(crs))
	assert.Equal(t, "1.1.2", staging.Spec.Source.Chart.Version)
	assert.Equal(t, "1.1.0", prod.Spec.Source.Chart.Version, "prod's own version")
	for _, cr := range []sluicev1.ChangeRequest{staging, prod} {
		assert.NotEqual(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result, "%s: %+v", cr.Name, cr.Spec.Verdict.Findings)
		files := artifactFiles(t, cr)
		require.NoError(t, chartrepo.Verify(string(cr.Spec.Source.Chart.Digest), files[sources.RemoteChartDir+"/"+sources.RemoteChartFile], files[sources.RemoteChartDir+"/"+sources.RemoteOCIManifestFile]), cr.Name)
	}
	assert.Equal(t, "1.1.0", getRelease(t, ns, "web-prod").Spec.Chart.Version)

	// 1.1.3 is in staging's range only.
	reg.pushChart(t, "1.1.3")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	assert.Contains(t, crs, sluicev1.ChangeRequestName("web-staging", head, 2))
	assert.NotContains(t, crs, sluicev1.ChangeRequestName("web-prod", head, 2), "prod is pinned")
}
