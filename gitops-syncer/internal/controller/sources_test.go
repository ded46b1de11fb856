package controller_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// sourcesService deploys a Kustomize overlay (its base outside the
// service folder) in staging and a folder of plain manifests in prod.
func sourcesService(r *gittest.Repo, stagingOverlay string) {
	r.WriteFile("services/shop/service.yaml", `apiVersion: sluice.dev/v1alpha1
kind: Service
name: shop
environments:
  - name: staging
    namespace: shop-staging
    kustomize: {path: overlays/staging}
  - name: prod
    namespace: shop-prod
    manifests: {path: manifests, recurse: true, exclude: ["*-test.yaml"]}
`)
	r.WriteFile("services/shop/overlays/staging/kustomization.yaml", stagingOverlay)
	r.WriteFile("bases/web/kustomization.yaml", "resources: [config.yaml]\n")
	r.WriteFile("bases/web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: blue\n")
	r.WriteFile("services/shop/manifests/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prod\ndata:\n  a: b\n")
	r.WriteFile("services/shop/manifests/sub/more.json", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"more"},"data":{"c":"d"}}`)
	r.WriteFile("services/shop/manifests/sub/x-test.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: left-out\n")
}

// TestSync_kustomizeOverlaysAndManifestFoldersMakeChangeRequests: a
// Kustomize overlay and a manifests folder each become a ChangeRequest
// with a manifestDigest and their source, from a real git repository; a
// push to the overlay's base (outside the service folder) is a change of
// the overlay's release only.
func TestSync_kustomizeOverlaysAndManifestFoldersMakeChangeRequests(t *testing.T) {
	ns := newNamespace(t)
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	sourcesService(fixture, "resources: [../../../../bases/web]\nnamePrefix: staging-\n")
	first := fixture.Commit("shop", "alice@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())

	waitHandled(t, repo, requestReconcile(t, repo))
	crs := changeRequests(t, ns)
	require.Len(t, crs, 2)
	staging := crs[sluicev1.ChangeRequestName("shop-staging", first, 1)]
	prod := crs[sluicev1.ChangeRequestName("shop-prod", first, 1)]
	require.NotNil(t, staging.Spec.Source)
	require.NotNil(t, prod.Spec.Source)
	assert.Equal(t, &sluicev1.KustomizeSource{Path: "services/shop/overlays/staging"}, staging.Spec.Source.Chart.Kustomize)
	assert.Equal(t, &sluicev1.ManifestsSource{Path: "services/shop/manifests", Recurse: true, Exclude: []string{"*-test.yaml"}}, prod.Spec.Source.Chart.Manifests)
	for _, cr := range []sluicev1.ChangeRequest{staging, prod} {
		assert.NotEmpty(t, cr.Spec.ManifestDigest, cr.Name)
		assert.NotEqual(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result, "%s: %+v", cr.Name, cr.Spec.Verdict.Findings)
	}

	fixture.WriteFile("bases/web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: green\n")
	second := fixture.Commit("base: green", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	require.Contains(t, crs, sluicev1.ChangeRequestName("shop-staging", second, 1), "the overlay's base is the staging release's input")
	assert.NotContains(t, crs, sluicev1.ChangeRequestName("shop-prod", second, 1), "prod reads nothing that changed")
	assert.NotEqual(t, staging.Spec.ManifestDigest, crs[sluicev1.ChangeRequestName("shop-staging", second, 1)].Spec.ManifestDigest)
}

// TestSync_anOverlayReachingIntoAnotherNamespaceOrOutOfTheRepoFails: the
// attacks a pusher can write into an overlay become failing verdicts with
// the file and line, as for a chart.
func TestSync_anOverlayReachingIntoAnotherNamespaceOrOutOfTheRepoFails(t *testing.T) {
	ns := newNamespace(t)
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	sourcesService(fixture, "resources: [../../../../bases/web]\nnamespace: shop-prod\n")
	first := fixture.Commit("staging into prod", "mallory@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))
	cr := changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", first, 1)]
	require.Equal(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result)
	require.True(t, hasFinding(cr.Spec.Verdict.Findings, "helm.namespace", "services/shop/overlays/staging/kustomization.yaml", 0), "%+v", cr.Spec.Verdict.Findings)

	fixture.WriteFile("services/shop/overlays/staging/kustomization.yaml", "resources:\n  - ../../../../bases/web\n  - /etc/passwd\n")
	second := fixture.Commit("absolute", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	cr = changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", second, 1)]
	require.Equal(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result)
	require.True(t, hasFinding(cr.Spec.Verdict.Findings, "", "services/shop/overlays/staging/kustomization.yaml", 3), "%+v", cr.Spec.Verdict.Findings)
}

func hasFinding(fs []sluicev1.Finding, policy, file string, line int32) bool {
	for _, f := range fs {
		if (policy == "" || f.Policy == policy) && f.File == file && (line == 0 || f.Line == line) && f.Severity == sluicev1.SeverityDeny {
			return true
		}
	}
	return false
}
