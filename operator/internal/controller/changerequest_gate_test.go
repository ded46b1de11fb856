package controller

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

// twoOf is the prod rule of the examples: two approvals from the sre group
// or the named people, authors excluded.
var twoOf = sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre", "k8s:alice", "k8s:bob", "github:alice", "github:dave")}

func gateFixture(t *testing.T) (*fixture, *testapplier.Applier, *sluicev1.Release) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	f.op = startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "prod", twoOf, nil)
	return f, ta, rel
}

// passSeeing runs one ChangeRequest pass of the gate fixture's operator
// for cr once its cache holds every one of approvals, so a check that the
// approvals changed nothing is not made before the operator saw them.
func (f *fixture) passSeeing(cr *sluicev1.ChangeRequest, approvals ...*sluicev1.Approval) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		for _, a := range approvals {
			if f.op.mgr.GetCache().Get(ctx(f.t), client.ObjectKeyFromObject(a), &sluicev1.Approval{}) != nil {
				return false
			}
		}
		return true
	}, waitFor, 20*time.Millisecond, "the operator's cache never held the approvals")
	_, err := f.op.changes.Reconcile(ctx(f.t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
	require.NoError(f.t, err)
}

func requireNotApplied(t *testing.T, f *fixture, ta *testapplier.Applier, cr *sluicev1.ChangeRequest) {
	t.Helper()
	require.Zero(t, ta.Calls(cr.Name), "the applier was called")
	_, ok := f.recorded(cr)
	require.False(t, ok, "the change was applied")
}

func TestGate_withNoApprovalTheChangeWaits(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, twoOf)
	got := f.waitingWith(cr)
	require.Equal(t, sluicev1.ReasonAwaitingApprovals, condition(got, sluicev1.ConditionApproved).Reason)
	require.Equal(t, int32(2), got.Status.EffectiveRule.Required)
	require.Equal(t, metav1.ConditionTrue, condition(got, sluicev1.ConditionValidated).Status)
	requireNotApplied(t, f, ta, cr)
}

func TestGate_withOneOfTwoApprovalsTheChangeWaits(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, twoOf)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	got := f.waitingWith(cr, "k8s:alice")
	require.Equal(t, int32(1), got.Status.Approvals)
	require.Contains(t, condition(got, sluicev1.ConditionApproved).Message, "1 of 2 approvals")
	requireNotApplied(t, f, ta, cr)
}

func TestGate_twoDistinctAllowedApproversApplyTheChange(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, twoOf)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:erin", sluicev1.DecisionApprove, inGroups("dev", "sre")) // allowed through k8s-group:sre
	got := f.phase(cr, sluicev1.PhaseApplied)
	require.Equal(t, ids("k8s:alice", "k8s:erin"), got.Status.ApprovedBy)
	require.Equal(t, sluicev1.ReasonApprovalsMet, condition(got, sluicev1.ConditionApproved).Reason)
	require.Equal(t, metav1.ConditionTrue, condition(got, sluicev1.ConditionApplied).Status)
	require.Equal(t, metav1.ConditionTrue, condition(got, sluicev1.ConditionReady).Status)
	require.Equal(t, testapplier.Name, got.Status.Apply.Applier)
	rec, ok := f.recorded(cr)
	require.True(t, ok)
	require.Equal(t, 1, rec.Effects)
	require.Equal(t, 1, ta.Calls(cr.Name))
	// An Event for every phase the change went through.
	require.Eventually(t, func() bool {
		var list eventsv1.EventList
		require.NoError(t, f.c.List(ctx(t), &list, client.InNamespace(f.ns)))
		seen := map[string]bool{}
		for _, e := range list.Items {
			if e.Regarding.Name == cr.Name {
				seen[e.Action] = true
			}
		}
		return seen["Approved"] && seen["Applying"] && seen["Applied"]
	}, waitFor, 100*time.Millisecond, "Events for Approved, Applying and Applied")
}

func TestGate_theSameApproverTwiceCountsOnce(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, twoOf)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.waitingWith(cr, "k8s:alice")
	requireNotApplied(t, f, ta, cr)
}

// Each "does not count" case creates the ignored Approval first and a valid
// one after it: once the valid one is counted the ignored one is in the
// cache too (one ordered watch), so "counted: only the valid one" is final.

func TestGate_anApprovalForAnotherDigestDoesNotCount(t *testing.T) {
	f, ta, rel := gateFixture(t)
	older := f.change(rel, twoOf)
	f.phase(older, sluicev1.PhaseAwaitingApproval)
	f.nextSecondAfter(older.CreationTimestamp.Time) // creation times order changes by the second
	cr := f.change(rel, twoOf)
	f.phase(older, sluicev1.PhaseSuperseded)
	f.decide(older, "k8s:bob", sluicev1.DecisionApprove) // the older content's digest
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.waitingWith(cr, "k8s:alice")
	requireNotApplied(t, f, ta, cr)
}

func TestGate_anApprovalForAnotherReleaseWithTheSameContentDoesNotCount(t *testing.T) {
	f, ta, rel := gateFixture(t)
	staging := f.release("checkout", "staging", twoOf, nil)
	cr := f.change(rel, twoOf, withContent("same content"))
	stagingCR := f.change(staging, twoOf, withContent("same content"))
	require.NotEqual(t, cr.Spec.ApprovalDigest, stagingCR.Spec.ApprovalDigest, "the digest binds the release")
	f.decide(stagingCR, "k8s:bob", sluicev1.DecisionApprove)
	// The same Approval, but naming prod's release with staging's digest.
	f.decide(cr, "k8s:carol", sluicev1.DecisionApprove, inGroups("sre"), forDigest(rel.Name, stagingCR.Spec.ApprovalDigest))
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.waitingWith(cr, "k8s:alice")
	f.waitingWith(stagingCR, "k8s:bob")
	requireNotApplied(t, f, ta, cr)
}

func TestGate_anApprovalByAnAuthorDoesNotCount(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, twoOf)
	f.decide(cr, "github:dave", sluicev1.DecisionApprove, fromPullRequest()) // dave wrote the change
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.waitingWith(cr, "k8s:alice")
	requireNotApplied(t, f, ta, cr)
}

func TestGate_anApprovalFromOutsideTheAllowlistDoesNotCount(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, twoOf)
	f.decide(cr, "k8s:mallory", sluicev1.DecisionApprove, inGroups("dev"))
	f.decide(cr, "github:mallory", sluicev1.DecisionApprove, fromPullRequest())
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.waitingWith(cr, "k8s:alice")
	requireNotApplied(t, f, ta, cr)
}

func TestGate_aVetoedChangeIsRejectedWhateverItsApprovals(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, twoOf)
	f.decide(cr, "k8s:bob", sluicev1.DecisionReject)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:erin", sluicev1.DecisionApprove, inGroups("sre"))
	got := f.phase(cr, sluicev1.PhaseRejected)
	require.Equal(t, ids("k8s:bob"), got.Status.RejectedBy)
	require.Equal(t, sluicev1.ReasonVetoed, condition(got, sluicev1.ConditionReady).Reason)
	// Terminal: a later revoke of the veto changes nothing.
	revoke := f.decide(cr, "k8s:bob", sluicev1.DecisionRevoke)
	approve := f.decide(cr, "k8s:carol", sluicev1.DecisionApprove, inGroups("sre"))
	f.passSeeing(cr, revoke, approve)
	require.Equal(t, sluicev1.PhaseRejected, f.get(cr).Status.Phase)
	requireNotApplied(t, f, ta, cr)
}

func TestGate_aRevokeAfterAnApproveWaitsAgainWhileNotYetApplying(t *testing.T) {
	f, ta, rel := gateFixture(t)
	f.holdLock(rel) // the change passes the gate but cannot start applying
	cr := f.change(rel, twoOf)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:bob", sluicev1.DecisionApprove)
	got := f.eventually(cr, "Approved, waiting for the lock", func(c *sluicev1.ChangeRequest) bool {
		a := condition(c, sluicev1.ConditionApplied)
		return c.Status.Phase == sluicev1.PhaseApproved && a != nil && a.Reason == sluicev1.ReasonWaitingForLock
	})
	require.NotNil(t, got.Status.ApprovedAt)
	f.decide(cr, "k8s:bob", sluicev1.DecisionRevoke)
	got = f.waitingWith(cr, "k8s:alice")
	require.Nil(t, got.Status.ApprovedAt)
	requireNotApplied(t, f, ta, cr)
}

func TestGate_aLowRiskChangeAutoApproves(t *testing.T) {
	f, _, _ := gateFixture(t)
	rule := sluicev1.ApprovalRule{Required: 2, AutoApproveRisk: sluicev1.AutoApproveLow}
	rel := f.release("cart", "staging", rule, nil)
	cr := f.change(rel, rule, withRisk(sluicev1.RiskLow))
	got := f.phase(cr, sluicev1.PhaseApplied)
	require.Equal(t, sluicev1.ReasonAutoApproved, condition(got, sluicev1.ConditionApproved).Reason)
	require.Zero(t, got.Status.Approvals)
}

func TestGate_anUnverifiableFindingBlocksAutoApproval(t *testing.T) {
	f, ta, _ := gateFixture(t)
	rule := sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveLow}
	rel := f.release("cart", "staging", rule, nil)
	cr := f.change(rel, rule, withRisk(sluicev1.RiskLow), withFindings(sluicev1.Finding{
		Severity: sluicev1.SeverityUnverifiable, Source: "terraform", Resource: "aws_s3_bucket.x", Message: "the bucket policy is known only after apply",
	}))
	got := f.waitingWith(cr)
	require.Contains(t, condition(got, sluicev1.ConditionApproved).Message, "unverifiable")
	requireNotApplied(t, f, ta, cr)
	// People can still approve it.
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.phase(cr, sluicev1.PhaseApplied)
}

func TestGate_aDenyFindingRejectsTheChange(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, twoOf, withFindings(sluicev1.Finding{Severity: sluicev1.SeverityDeny, Policy: "no_public_buckets", Message: "bucket is public"}),
		func(c *sluicev1.ChangeRequest) { c.Spec.Verdict.Result = sluicev1.VerdictFail })
	got := f.phase(cr, sluicev1.PhaseRejected)
	require.Equal(t, sluicev1.ReasonPolicyDenied, condition(got, sluicev1.ConditionValidated).Reason)
	requireNotApplied(t, f, ta, cr)
}

func TestGate_aWrongApprovalDigestRejectsTheChange(t *testing.T) {
	f, ta, rel := gateFixture(t)
	// The digest describes other content than the change carries.
	bad := f.change(rel, twoOf, func(c *sluicev1.ChangeRequest) {
		c.Spec.ApprovalDigest = sluicev1.ComputeApprovalDigest(c.Namespace, c.Spec.Release, sluicev1.SHA256Digest([]byte("other content")), c.Spec.ManifestDigest, "")
	})
	got := f.phase(bad, sluicev1.PhaseRejected)
	require.Equal(t, sluicev1.ReasonDigestMismatch, condition(got, sluicev1.ConditionReady).Reason)
	requireNotApplied(t, f, ta, bad)
}

func TestGate_aPushLoweringRequiredToZeroStillNeedsTheAppliedRulesApprovals(t *testing.T) {
	f, ta, rel := gateFixture(t)
	first := f.change(rel, twoOf)
	f.decide(first, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(first, "k8s:bob", sluicev1.DecisionApprove)
	f.phase(first, sluicev1.PhaseApplied)
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		return r.Status.AppliedChange == first.Name && r.Status.AppliedRule != nil && r.Status.CurrentChange == ""
	}, waitFor, 50*time.Millisecond)
	require.Equal(t, int32(2), f.getRelease(rel.Name).Status.AppliedRule.Required)

	lowered := sluicev1.ApprovalRule{Required: 0, AllowAuthor: true, AutoApproveRisk: sluicev1.AutoApproveHigh}
	second := f.change(rel, lowered, withRisk(sluicev1.RiskLow))
	got := f.waitingWith(second)
	require.Equal(t, int32(2), got.Status.EffectiveRule.Required)
	require.Equal(t, sluicev1.AutoApproveNone, got.Status.EffectiveRule.AutoApproveRisk)
	require.False(t, got.Status.EffectiveRule.AllowAuthor)
	requireNotApplied(t, f, ta, second)
	f.decide(second, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(second, "github:alice", sluicev1.DecisionApprove, fromPullRequest())
	f.phase(second, sluicev1.PhaseApplied)

	// The loosened rule was approved under the old one; now it is in force.
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		return r.Status.AppliedChange == second.Name && r.Status.AppliedRule != nil && r.Status.AppliedRule.Required == 0
	}, waitFor, 50*time.Millisecond)
	third := f.change(rel, lowered, withRisk(sluicev1.RiskLow))
	f.phase(third, sluicev1.PhaseApplied)
}

func TestGate_anApprovalPolicyFloorBeatsALooserManifest(t *testing.T) {
	f, ta, _ := gateFixture(t)
	require.NoError(t, f.c.Create(ctx(t), &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "critical-floor", Namespace: f.ns},
		Spec: sluicev1.ApprovalPolicySpec{
			Environments:    []sluicev1.EnvironmentName{"prod"},
			ReleaseSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "critical"}},
			Rule:            sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre")},
		},
	}))
	loose := sluicev1.ApprovalRule{Required: 0, AutoApproveRisk: sluicev1.AutoApproveHigh, AllowAuthor: true}
	rel := f.release("payments", "prod", loose, map[string]string{"tier": "critical"})
	// Not selected (other labels): the loose rule applies.
	other := f.release("docs", "prod", loose, map[string]string{"tier": "web"})
	free := f.change(other, loose)
	f.phase(free, sluicev1.PhaseApplied)

	cr := f.change(rel, loose, withRisk(sluicev1.RiskLow))
	got := f.waitingWith(cr)
	require.Equal(t, int32(2), got.Status.EffectiveRule.Required)
	require.Equal(t, ids("k8s-group:sre"), got.Status.EffectiveRule.Approvers)
	requireNotApplied(t, f, ta, cr)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove) // not in sre
	f.decide(cr, "k8s:erin", sluicev1.DecisionApprove, inGroups("sre"))
	f.waitingWith(cr, "k8s:erin")
	f.decide(cr, "k8s:frank", sluicev1.DecisionApprove, inGroups("sre"))
	f.phase(cr, sluicev1.PhaseApplied)
}

func TestGate_aNewerChangeSupersedesAnOlderWaitingOne(t *testing.T) {
	f, ta, rel := gateFixture(t)
	older := f.change(rel, twoOf)
	f.decide(older, "k8s:alice", sluicev1.DecisionApprove)
	f.waitingWith(older, "k8s:alice")
	f.nextSecondAfter(older.CreationTimestamp.Time) // creation times order changes by the second
	newer := f.change(rel, twoOf)
	got := f.phase(older, sluicev1.PhaseSuperseded)
	require.Contains(t, condition(got, sluicev1.ConditionReady).Message, newer.Name)
	f.waitingWith(newer)
	// The older change stays superseded even when it gets its approvals.
	f.passSeeing(older, f.decide(older, "k8s:bob", sluicev1.DecisionApprove))
	require.Equal(t, sluicev1.PhaseSuperseded, f.get(older).Status.Phase)
	requireNotApplied(t, f, ta, older)
}

func TestGate_anApprovalRevokedBetweenApprovedAndTheHandOffStopsIt(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	var hooked atomic.Int32
	var target atomic.Value
	target.Store("")
	startOperator(t, f.ns, operatorConfig{applier: ta, beforeHandOff: func(ctx context.Context, cr *sluicev1.ChangeRequest) {
		if cr.Name != target.Load().(string) || hooked.Add(1) != 1 {
			return
		}
		// The gate passed on the cache; bob revokes right now, before the
		// operator re-reads everything.
		f.decide(cr, "k8s:bob", sluicev1.DecisionRevoke)
	}})
	rel := f.release("checkout", "prod", twoOf, nil)
	cr := f.change(rel, twoOf)
	target.Store(cr.Name)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:bob", sluicev1.DecisionApprove)
	got := f.eventually(cr, "stopped at the hand-off", func(c *sluicev1.ChangeRequest) bool {
		a := condition(c, sluicev1.ConditionApplied)
		return a != nil && a.Reason == sluicev1.ReasonGateFailedAtHandOff
	})
	require.Equal(t, sluicev1.PhaseAwaitingApproval, got.Status.Phase)
	require.Equal(t, int32(1), hooked.Load())
	f.waitingWith(cr, "k8s:alice")
	requireNotApplied(t, f, ta, cr)
	require.Eventually(t, func() bool { return f.getRelease(rel.Name).Status.CurrentChange == "" }, waitFor, 50*time.Millisecond, "the lock was handed back")
}

func TestGate_aPreviewIsNeverApplied(t *testing.T) {
	f, ta, rel := gateFixture(t)
	cr := f.change(rel, sluicev1.ApprovalRule{}, asPreview(12))
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	got := f.phase(cr, sluicev1.PhasePreview)
	require.Equal(t, sluicev1.ReasonPreview, condition(got, sluicev1.ConditionReady).Reason)
	requireNotApplied(t, f, ta, cr)
}

func TestGate_aPolicyAddedWhileAChangeWaitsRaisesItsRule(t *testing.T) {
	f, ta, _ := gateFixture(t)
	rule := sluicev1.ApprovalRule{Required: 2}
	rel := f.release("cart", "prod", rule, nil)
	cr := f.change(rel, rule)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.waitingWith(cr, "k8s:alice")
	require.NoError(t, f.c.Create(ctx(t), &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "three", Namespace: f.ns},
		Spec:       sluicev1.ApprovalPolicySpec{Rule: sluicev1.ApprovalRule{Required: 3}},
	}))
	f.eventually(cr, "effective rule raised to 3", func(c *sluicev1.ChangeRequest) bool {
		return c.Status.EffectiveRule != nil && c.Status.EffectiveRule.Required == 3
	})
	f.decide(cr, "k8s:bob", sluicev1.DecisionApprove)
	f.waitingWith(cr, "k8s:alice", "k8s:bob")
	requireNotApplied(t, f, ta, cr)
	f.decide(cr, "k8s:carol", sluicev1.DecisionApprove)
	f.phase(cr, sluicev1.PhaseApplied)
}
