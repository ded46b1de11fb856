package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

// withDigestOf gives the change the content and manifests named by
// content, so two changes at different commits can carry the same
// approvalDigest (the same release, content and manifests).
func withDigestOf(content string) changeOpt {
	return func(c *sluicev1.ChangeRequest) {
		c.Spec.ContentDigest = sluicev1.SHA256Digest([]byte("content " + content))
		c.Spec.ManifestDigest = sluicev1.SHA256Digest([]byte("manifests " + content))
	}
}

func merging(prs ...int64) changeOpt {
	return func(c *sluicev1.ChangeRequest) { c.Spec.MergedPullRequests = prs }
}

// aliceOnly needs alice's approval for every change.
var aliceOnly = sluicev1.ApprovalRule{Required: 1, Approvers: ids("k8s:alice", "github:alice")}

// TestGate_aPushThatBringsBackApprovedContentWaitsForApproval is the replay
// attack of issue 21: alice approved prod at replicas 4 (change A), later
// at replicas 5 (change B). A push of replicas 4 again (change C) has A's
// approvalDigest; A's approval must not apply it. Returning to earlier
// content is a change to approve like any other.
func TestGate_aPushThatBringsBackApprovedContentWaitsForApproval(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "prod", aliceOnly, nil)

	a := f.change(rel, aliceOnly, withDigestOf("replicas: 4"))
	f.decide(a, "k8s:alice", sluicev1.DecisionApprove)
	f.phase(a, sluicev1.PhaseApplied)
	b := f.change(rel, aliceOnly, withDigestOf("replicas: 5"))
	f.decide(b, "k8s:alice", sluicev1.DecisionApprove)
	f.phase(b, sluicev1.PhaseApplied)

	c := f.change(rel, aliceOnly, withDigestOf("replicas: 4"))
	require.Equal(t, a.Spec.ApprovalDigest, c.Spec.ApprovalDigest, "the push brings back A's content")
	got := f.waitingWith(c)
	require.Contains(t, condition(got, sluicev1.ConditionApproved).Message, "given on another change with the same content do not count")
	requireNotApplied(t, f, ta, c)

	// Approved again, on the change itself, it goes.
	f.decide(c, "k8s:alice", sluicev1.DecisionApprove)
	got = f.phase(c, sluicev1.PhaseApplied)
	require.Equal(t, ids("k8s:alice"), got.Status.ApprovedBy)
}

// TestGate_aReviewOfAPreviewCountsForTheChangeThatMergedItsPullRequest: a
// pull request's preview reviewed by alice; a branch change with the same
// content that did not merge the pull request waits, and the change that
// merged it is applied on the review.
func TestGate_aReviewOfAPreviewCountsForTheChangeThatMergedItsPullRequest(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "prod", aliceOnly, nil)

	preview := f.change(rel, aliceOnly, withDigestOf("replicas: 3"), asPreview(7))
	f.decide(preview, "github:alice", sluicev1.DecisionApprove, fromPullRequest())
	f.phase(preview, sluicev1.PhasePreview)

	other := f.change(rel, aliceOnly, withDigestOf("replicas: 3"), merging(8))
	f.waitingWith(other)
	requireNotApplied(t, f, ta, other)

	merge := f.change(rel, aliceOnly, withDigestOf("replicas: 3"), merging(7))
	require.Equal(t, preview.Spec.ApprovalDigest, merge.Spec.ApprovalDigest)
	got := f.phase(merge, sluicev1.PhaseApplied)
	require.Equal(t, ids("github:alice"), got.Status.ApprovedBy)
	require.Equal(t, sluicev1.ReasonApprovalsMet, condition(got, sluicev1.ConditionApproved).Reason)
}

// TestRelease_aVetoOutlivesTheChangeItWasGivenOn: bob rejects content
// "bad" on change A; A is pruned by retention and the Approvals of its
// digest are garbage-collected, but bob's standing reject is kept, so a
// later push of the same content is rejected again instead of being judged
// afresh (here it would auto-approve). Superseded decisions and approves
// of the pruned change are collected.
func TestRelease_aVetoOutlivesTheChangeItWasGivenOn(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta, keep: 1, grace: time.Millisecond})
	// Low risk goes by itself; A (medium) waits for an approval.
	rule := sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveLow}
	rel := f.release("checkout", "staging", rule, nil)
	a := f.change(rel, rule, withDigestOf("bad"))
	f.waitingWith(a)
	veto := f.decide(a, "k8s:bob", sluicev1.DecisionReject)
	collected := []*sluicev1.Approval{
		f.decide(a, "k8s:dave", sluicev1.DecisionReject),
		f.decide(a, "k8s:dave", sluicev1.DecisionRevoke),
		f.decide(a, "k8s:carol", sluicev1.DecisionApprove),
	}
	got := f.phase(a, sluicev1.PhaseRejected)
	require.Equal(t, sluicev1.ReasonVetoed, condition(got, sluicev1.ConditionReady).Reason)

	b := f.change(rel, rule, withDigestOf("good"), withRisk(sluicev1.RiskLow))
	f.phase(b, sluicev1.PhaseApplied)
	require.Eventually(t, func() bool {
		if !apierrors.IsNotFound(f.c.Get(ctx(t), client.ObjectKeyFromObject(a), &sluicev1.ChangeRequest{})) {
			return false
		}
		for _, ap := range collected {
			if !apierrors.IsNotFound(f.c.Get(ctx(t), client.ObjectKeyFromObject(ap), &sluicev1.Approval{})) {
				return false
			}
		}
		return true
	}, waitFor, 50*time.Millisecond, "A is pruned and the approvals no change needs are collected")
	require.NoError(t, f.c.Get(ctx(t), client.ObjectKeyFromObject(veto), &sluicev1.Approval{}), "bob's standing reject is kept")

	// The same content pushed again, rated low this time: without the
	// veto it would auto-approve.
	c := f.change(rel, rule, withDigestOf("bad"), withRisk(sluicev1.RiskLow))
	require.Equal(t, a.Spec.ApprovalDigest, c.Spec.ApprovalDigest)
	got = f.phase(c, sluicev1.PhaseRejected)
	require.Equal(t, ids("k8s:bob"), got.Status.RejectedBy)
	require.Equal(t, sluicev1.ReasonVetoed, condition(got, sluicev1.ConditionReady).Reason, describe(got))
	requireNotApplied(t, f, ta, c)
}
