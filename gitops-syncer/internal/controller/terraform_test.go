package controller_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
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

	// The state lives in the control namespace, one per release, and a plan
	// (whose credential may only read and lock it) never writes it.
	var secrets corev1.SecretList
	require.NoError(t, k8s.List(context.Background(), &secrets, client.InNamespace(ns)))
	var state []string
	for _, s := range secrets.Items {
		if strings.HasPrefix(s.Name, "tfstate-") {
			state = append(state, s.Name)
		}
	}
	assert.NotContains(t, state, "tfstate-staging-checkout-staging", "a plan wrote state")

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

// TestSync_crashBeforeThePlanSecretEndsWithAMatchingPlan: the process dies
// after the ChangeRequest is created and before its plan Secret; after the
// restart the latest ChangeRequest of the release has a plan Secret whose
// sha256 is the one it records (the same attempt when the plan comes out
// identical, the next attempt when it does not), and nothing is duplicated.
func TestSync_crashBeforeThePlanSecretEndsWithAMatchingPlan(t *testing.T) {
	ns := newNamespace(t)
	fixture := newCatalogRepo(t, t.TempDir())
	head := fixture.Head("main")
	first := startSyncer(t, ns, "", func(s *syncer.Syncer) {
		s.Reconciler.Hooks.AfterChangeRequestCreated = func(cr *sluicev1.ChangeRequest) error {
			if cr.Spec.Release == "checkout-staging" {
				return errors.New("simulated crash")
			}
			return nil
		}
	})
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	name := sluicev1.ChangeRequestName("checkout-staging", head, 1)
	require.Eventually(t, func() bool { _, ok := changeRequests(t, ns)[name]; return ok }, timeout, tick)
	first.stop()
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: sluicev1.PlanSecretName(name, 0)}, &corev1.Secret{})
	require.True(t, apierrors.IsNotFound(err), "the crash came before the plan Secret")

	startSyncer(t, ns, first.dataDir)
	waitHandled(t, repo, requestReconcile(t, repo))
	rel := getRelease(t, ns, "checkout-staging")
	require.NotEmpty(t, rel.Status.LatestChange)
	latest := changeRequests(t, ns)[rel.Status.LatestChange]
	plan := &corev1.Secret{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: sluicev1.PlanSecretName(latest.Name, 0)}, plan))
	assert.Equal(t, latest.Spec.PlanFileSHA256, sluicev1.SHA256Digest(plan.Data[sluicev1.PlanSecretKey]))
	count := 0
	for _, cr := range changeRequests(t, ns) {
		if cr.Spec.Release == "checkout-staging" {
			count++
		}
	}
	assert.LessOrEqual(t, count, 2, "at most the original and one re-plan")
	t.Logf("checkout-staging ends at %s (%d ChangeRequest(s))", latest.Name, count)
}
