package controller

import (
	"testing"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// summarizeWith runs the Release summary over one change in phase, with
// the lock held by holder.
func summarizeWith(phase sluicev1.ChangeRequestPhase, holder string) []metav1.Condition {
	rel := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: "checkout-prod", Generation: 1}}
	rel.Status.CurrentChange = holder
	cr := sluicev1.ChangeRequest{ObjectMeta: metav1.ObjectMeta{Name: "checkout-prod-abc-1"}, Spec: sluicev1.ChangeRequestSpec{Revision: "abc"}}
	cr.Status.Phase = phase
	s := &releaseScope{
		rel:     rel,
		summary: reconcile.Summary{Conditions: &rel.Status.Conditions, ObservedGeneration: &rel.Status.ObservedGeneration, Generation: rel.Generation, MaxMessage: maxMessage},
		all:     []sluicev1.ChangeRequest{cr},
	}
	s.summarize()
	for i := range rel.Status.Conditions {
		rel.Status.Conditions[i].LastTransitionTime = metav1.Time{}
	}
	return rel.Status.Conditions
}

// While its newest change holds the lock, a Release's summary does not
// follow the holder's own steps: Approved and Applying summarise alike, so
// an apply that outlasts SummaryDelay costs no Release write per step.
// Without the lock, the summary still names the change's phase.
func TestReleaseSummary_theLockHoldersStepsAreOneSummary(t *testing.T) {
	approved := summarizeWith(sluicev1.PhaseApproved, "checkout-prod-abc-1")
	applying := summarizeWith(sluicev1.PhaseApplying, "checkout-prod-abc-1")
	require.Equal(t, approved, applying, "the holder's Approved and Applying summarise alike")
	ready := meta.FindStatusCondition(applying, sluicev1.ConditionReady)
	require.NotNil(t, ready)
	require.Equal(t, metav1.ConditionFalse, ready.Status)
	require.Equal(t, sluicev1.ReasonApplying, ready.Reason)
	require.Equal(t, "the newest change checkout-prod-abc-1 holds the apply lock", ready.Message)

	applied := meta.FindStatusCondition(summarizeWith(sluicev1.PhaseApplied, ""), sluicev1.ConditionReady)
	require.Equal(t, metav1.ConditionTrue, applied.Status, "an applied change is Ready")
	waiting := meta.FindStatusCondition(summarizeWith(sluicev1.PhaseApproved, ""), sluicev1.ConditionReady)
	require.Equal(t, "the newest change checkout-prod-abc-1 is Approved", waiting.Message, "a change waiting for the lock is named with its phase")
	require.NotEqual(t, approved, summarizeWith(sluicev1.PhaseApproved, ""), "holding the lock shows")
}
