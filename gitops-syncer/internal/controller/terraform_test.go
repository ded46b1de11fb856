package controller_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestSync_terraformPlanIsStoredAndItsModulesCount uses the sample
// checkout service: a real terraform_data stack with a shared local module,
// planned against state in the control namespace.
func TestSync_terraformPlanIsStoredAndItsModulesCount(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := newCatalogRepo(t, root)
	head := fixture.Head("main")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))

	crs := changeRequests(t, ns)
	cr, ok := crs[sluicev1.ChangeRequestName("checkout-staging", head, 1)]
	require.True(t, ok, "have %v", keys(crs))
	assert.NotEmpty(t, cr.Spec.PlanDigest)
	require.NotEmpty(t, cr.Spec.PlanFileSHA256)
	require.NotNil(t, cr.Spec.PlanSummary)
	assert.EqualValues(t, 2, cr.Spec.PlanSummary.Add, "two terraform_data resources")

	plan := &corev1.Secret{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: sluicev1.PlanSecretName(cr.Name, 0)}, plan))
	assert.Equal(t, cr.Spec.PlanFileSHA256, sluicev1.SHA256Digest(plan.Data[sluicev1.PlanSecretKey]))
	assert.Equal(t, cr.Name, plan.OwnerReferences[0].Name)

	// The state lives in the control namespace, one per release.
	var secrets corev1.SecretList
	require.NoError(t, k8s.List(context.Background(), &secrets, client.InNamespace(ns)))
	var state []string
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, "tfstate-") {
			state = append(state, s.Name)
		}
	}
	assert.Contains(t, state, "tfstate-staging-checkout-staging")

	// A change to the shared module is a change of checkout only.
	fixture.WriteFile("services/_modules/queue/main.tf", strings.Replace(mustRead(t, servicesDir+"/_modules/queue/main.tf"), `"30s"`, `"60s"`, 1))
	next := fixture.Commit("longer queue visibility", "dave@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	assert.Contains(t, crs, sluicev1.ChangeRequestName("checkout-staging", next, 1))
	assert.Contains(t, crs, sluicev1.ChangeRequestName("checkout-prod", next, 1))
	assert.NotContains(t, crs, sluicev1.ChangeRequestName("cart-staging", next, 1))
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
