package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// pushersRule is what a pusher writes for an environment they add: nothing
// to ask, authors welcome, everything auto-approves.
var pushersRule = sluicev1.ApprovalRule{Required: 0, AllowAuthor: true, AutoApproveRisk: sluicev1.AutoApproveHigh}

// sreFloor is the platform's production floor in these tests.
var sreFloor = sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre"), AutoApproveRisk: sluicev1.AutoApproveNone}

func targeting(ns string) func(*sluicev1.Release) {
	return func(r *sluicev1.Release) { r.Spec.TargetNamespace = ns }
}

// TestGate_aNewEnvironmentNameInAProtectedNamespaceIsNotAutoApplied is the
// attack of issue 12 through the ChangeRequest reconciler: prod is protected
// by an ApprovalPolicy naming the environment "prod"; the pusher adds
// "prod2" deploying to the same namespace with required 0 and
// autoApproveRisk high. The change must wait for prod's approvals.
func TestGate_aNewEnvironmentNameInAProtectedNamespaceIsNotAutoApplied(t *testing.T) {
	f, ta, prod := gateFixture(t)
	require.NoError(t, f.c.Create(ctx(t), &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-floor", Namespace: f.ns},
		Spec:       sluicev1.ApprovalPolicySpec{Environments: []sluicev1.EnvironmentName{"prod"}, Rule: sreFloor},
	}))
	prod2 := f.release("checkout", "prod2", pushersRule, nil, targeting(prod.Spec.TargetNamespace))
	cr := f.change(prod2, pushersRule, withRisk(sluicev1.RiskLow))

	got := f.waitingWith(cr)
	require.Equal(t, int32(2), got.Status.EffectiveRule.Required)
	require.Equal(t, sluicev1.AutoApproveNone, got.Status.EffectiveRule.AutoApproveRisk)
	require.False(t, got.Status.EffectiveRule.AllowAuthor)
	requireNotApplied(t, f, ta, cr)

	// prod's approvers can still ship it; then prod2 is at home there.
	f.decide(cr, "k8s:erin", sluicev1.DecisionApprove, inGroups("sre"))
	f.decide(cr, "k8s:frank", sluicev1.DecisionApprove, inGroups("sre"))
	f.phase(cr, sluicev1.PhaseApplied)
	require.Eventually(t, func() bool {
		return f.getRelease(prod2.Name).Status.AppliedTargetNamespace == prod.Spec.TargetNamespace
	}, waitFor, 50*time.Millisecond, "the Release records the namespace it applied to")
}

// TestGate_aNamespaceLabelPolicyHoldsAChangeAndFollowsLabelChanges shows a
// policy selecting by the target Namespace's labels: a label added while a
// change waits raises its rule (the Namespace watch).
func TestGate_aNamespaceLabelPolicyHoldsAChangeAndFollowsLabelChanges(t *testing.T) {
	f, ta, _ := gateFixture(t)
	live := "checkout-live-" + rand.String(5)
	require.NoError(t, f.c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: live}}))
	require.NoError(t, f.c.Create(ctx(t), &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "production", Namespace: f.ns},
		Spec: sluicev1.ApprovalPolicySpec{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/tier": "production"}},
			Rule:              sreFloor,
		},
	}))
	oneOf := sluicev1.ApprovalRule{Required: 1}
	rel := f.release("checkout", "live", oneOf, nil, targeting(live))
	cr := f.change(rel, oneOf)
	got := f.waitingWith(cr)
	require.Equal(t, int32(1), got.Status.EffectiveRule.Required, "unlabelled: the policy does not select")

	ns := &corev1.Namespace{}
	require.NoError(t, f.c.Get(ctx(t), client.ObjectKey{Name: live}, ns))
	ns.Labels = map[string]string{"sluice.dev/tier": "production"}
	require.NoError(t, f.c.Update(ctx(t), ns))
	f.eventually(cr, "effective rule raised by the namespace policy", func(c *sluicev1.ChangeRequest) bool {
		return c.Status.EffectiveRule != nil && c.Status.EffectiveRule.Required == 2
	})
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove) // would have been enough before
	f.waitingWith(cr)
	requireNotApplied(t, f, ta, cr)
	f.decide(cr, "k8s:erin", sluicev1.DecisionApprove, inGroups("sre"))
	f.decide(cr, "k8s:frank", sluicev1.DecisionApprove, inGroups("sre"))
	f.phase(cr, sluicev1.PhaseApplied)
}

// TestGate_anAuthorApprovingUnderAMappedIdentityDoesNotCount is the attack
// of issue 12: dave authored the change as email:dave@example.com and
// approves as the Kubernetes user k8s:dave, which a Person maps to him.
func TestGate_anAuthorApprovingUnderAMappedIdentityDoesNotCount(t *testing.T) {
	f, ta, _ := gateFixture(t)
	name := "dave-" + rand.String(5)
	dave := &sluicev1.Person{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       sluicev1.PersonSpec{Identities: ids("email:Dave@example.com", "k8s:dave", "github:dave")},
	}
	require.NoError(t, f.c.Create(ctx(t), dave))
	t.Cleanup(func() { _ = env.Client.Delete(ctx(t), dave) })

	rule := sluicev1.ApprovalRule{Required: 2}
	rel := f.release("cart", "prod", rule, nil)
	cr := f.change(rel, rule, func(c *sluicev1.ChangeRequest) { c.Spec.Authors = ids("email:dave@example.com") })
	f.decide(cr, "k8s:dave", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:erin", sluicev1.DecisionApprove)
	// erin's approval is seen after dave's: counted, only erin.
	f.waitingWith(cr, "k8s:erin")
	requireNotApplied(t, f, ta, cr)
	f.decide(cr, "k8s:frank", sluicev1.DecisionApprove)
	got := f.phase(cr, sluicev1.PhaseApplied)
	require.Equal(t, ids("k8s:erin", "k8s:frank"), got.Status.ApprovedBy)
}
