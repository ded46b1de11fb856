package controller_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// twoEnvService writes a service with staging and prod, each with its own
// values file.
func twoEnvService(r *gittest.Repo, prodRequired int) {
	r.WriteFile("services/shop/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: shop\nchart: {path: charts/service}\nvalues: [values.yaml]\nenvironments:\n"+
		"  - name: staging\n    namespace: shop-staging\n    values: [values-staging.yaml]\n    approval: {required: 1}\n"+
		"  - name: prod\n    namespace: shop-prod\n    values: [values-prod.yaml]\n    approval: {required: "+strconv.Itoa(prodRequired)+"}\n")
}

// TestSync_aChangeIsPerRelease: a release's inputs are its own environment
// entry with the shared fields of service.yaml, its values files, the chart
// and the stack. A push changing only values-staging.yaml makes a staging
// ChangeRequest and none for prod; one changing only prod's entry makes
// none for staging.
func TestSync_aChangeIsPerRelease(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := gittest.NewRepo(t, root, "infra")
	fixture.CopyDir(chartDir, "charts/service")
	twoEnvService(fixture, 1)
	fixture.WriteFile("services/shop/values.yaml", "image:\n  repository: ghcr.io/example/shop\n  tag: \"1.0.0\"\nreplicaCount: 1\n")
	fixture.WriteFile("services/shop/values-staging.yaml", "replicaCount: 1\n")
	fixture.WriteFile("services/shop/values-prod.yaml", "replicaCount: 2\n")
	first := fixture.Commit("shop", "alice@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())

	waitHandled(t, repo, requestReconcile(t, repo))
	require.Len(t, changeRequests(t, ns), 2)
	prodTree := getRelease(t, ns, "shop-prod").Status.LastSyncedTree

	fixture.WriteFile("services/shop/values-staging.yaml", "replicaCount: 3\n")
	second := fixture.Commit("staging: three replicas", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs := changeRequests(t, ns)
	assert.Contains(t, crs, sluicev1.ChangeRequestName("shop-staging", second, 1), "staging read the changed file")
	assert.NotContains(t, crs, sluicev1.ChangeRequestName("shop-prod", second, 1), "prod reads nothing that changed")
	assert.Len(t, crs, 3)
	prod := getRelease(t, ns, "shop-prod")
	assert.Equal(t, prodTree, prod.Status.LastSyncedTree)
	assert.Equal(t, sluicev1.ChangeRequestName("shop-prod", first, 1), prod.Status.LatestChange)

	stagingTree := getRelease(t, ns, "shop-staging").Status.LastSyncedTree
	twoEnvService(fixture, 2)
	third := fixture.Commit("prod: two approvals", "carol@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	assert.Contains(t, crs, sluicev1.ChangeRequestName("shop-prod", third, 1), "prod's entry changed")
	assert.NotContains(t, crs, sluicev1.ChangeRequestName("shop-staging", third, 1), "another environment's entry is not staging's input")
	assert.Equal(t, stagingTree, getRelease(t, ns, "shop-staging").Status.LastSyncedTree)
}

// TestSync_inputsThatRenderWhatIsAppliedAskNobody: a push whose inputs
// changed but whose rendered manifest equals the applied revision's makes
// no ChangeRequest; the Release says it is unchanged and why.
func TestSync_inputsThatRenderWhatIsAppliedAskNobody(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	first := fixture.Head("main")
	waitHandled(t, repo, requestReconcile(t, repo))
	name := sluicev1.ChangeRequestName("alpha-staging", first, 1)
	markApplied(t, ns, "alpha-staging", name, first)

	// A comment in the values file: an input changed, the render did not.
	fixture.WriteFile("services/alpha/values.yaml", "# the same, said again\nimage:\n  repository: ghcr.io/example/alpha\n  tag: \"1.0.0\"\nreplicaCount: 1\n")
	second := fixture.Commit("comment only", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	assert.NotContains(t, changeRequests(t, ns), sluicev1.ChangeRequestName("alpha-staging", second, 1))
	rel := getRelease(t, ns, "alpha-staging")
	assert.Equal(t, second, rel.Status.LastSyncedCommit)
	assert.Equal(t, name, rel.Status.LatestChange, "the applied change stays the latest")
	synced := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionSynced)
	require.NotNil(t, synced)
	assert.Equal(t, sluicev1.ReasonUnchanged, synced.Reason)
	assert.Contains(t, synced.Message, "unchanged: rendered manifest and plan")

	// A real change still makes a ChangeRequest.
	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"1.0.1\"\nreplicaCount: 1\n")
	third := fixture.Commit("alpha 1.0.1", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	assert.Contains(t, changeRequests(t, ns), sluicev1.ChangeRequestName("alpha-staging", third, 1))
}

// markApplied records, as the operator would, that change cr of release
// was applied at rev.
func markApplied(t *testing.T, ns, release, cr, rev string) {
	t.Helper()
	ctx := context.Background()
	c := &sluicev1.ChangeRequest{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: cr}, c))
	c.Status.Phase = sluicev1.PhaseApplied
	require.NoError(t, k8s.Status().Update(ctx, c))
	rel := getRelease(t, ns, release)
	rel.Status.AppliedChange, rel.Status.AppliedRevision, rel.Status.AppliedDigest = cr, rev, c.Spec.ApprovalDigest
	meta.SetStatusCondition(&rel.Status.Conditions, metav1.Condition{Type: sluicev1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: sluicev1.ReasonSucceeded, Message: "applied"})
	require.NoError(t, k8s.Status().Update(ctx, rel))
}
