package drift_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/drift"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
)

// revertOf is the ChangeRequest the syncer makes for the drift
// controller's re-plan request: the applied revision's content with the
// re-plan's Terraform plan, the next attempt, the request's annotation.
func revertOf(applied *sluicev1.ChangeRequest, planDigest, planFile string) *sluicev1.ChangeRequest {
	cr := &sluicev1.ChangeRequest{}
	cr.Name = sluicev1.ChangeRequestName(applied.Spec.Release, applied.Spec.Revision, 2)
	cr.Namespace = applied.Namespace
	cr.Annotations = map[string]string{sluicev1.AnnotationReplan: sluicev1.DriftRevertPrefix + applied.Name}
	cr.Spec = *applied.Spec.DeepCopy()
	cr.Spec.Attempt = 2
	cr.Spec.PlanDigest, cr.Spec.PlanFileSHA256 = sluicev1.Digest(planDigest), sluicev1.Digest(planFile)
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	return cr
}

// decide is the gate's decision on cr with no standing Approvals, so
// only a re-apply of the applied digest can pass it.
func decide(t *testing.T, f *drift.TerraformFixture, cr *sluicev1.ChangeRequest) gate.Decision {
	t.Helper()
	env, _ := drift.SharedEnv()
	rel := f.Release()
	in, err := gateinput.Load(context.Background(), env.Client, cr, rel)
	require.NoError(t, err)
	d, errs := gate.Decide(in, cr, nil)
	require.Empty(t, errs)
	return d
}

// TestRevert_aTerraformRevertPassesOnlyWhenItsReplanReproducesTheApprovedDigest:
// a drift revert of a Terraform release re-applies without a new approval
// only when the re-plan of the applied revision (against today's state)
// is the approved plan again, as after the resources were destroyed
// behind Sluice's back; a re-plan that moves a changed resource back is a
// plan nobody approved, and waits for approval with a gate message that
// says so.
func TestRevert_aTerraformRevertPassesOnlyWhenItsReplanReproducesTheApprovedDigest(t *testing.T) {
	f := drift.NewTerraformFixture(t)
	f.MarkApplied()
	applied := f.Applied()

	// A second terraform run changes the input: the re-plan updates it
	// back, which is not the approved plan (that created it).
	f.RunTerraform("large")
	replan := f.Replan()
	require.NotEqual(t, string(applied.Spec.PlanDigest), replan.Report.PlanDigest)
	d := decide(t, f, revertOf(applied, replan.Report.PlanDigest, replan.Report.PlanFileSHA256))
	require.False(t, d.Passed, d.Message)
	require.Equal(t, sluicev1.ReasonAwaitingApprovals, d.Reason, d.Message)
	require.Contains(t, d.Message, "drift revert of "+applied.Name)
	require.Contains(t, d.Message, "needs approval like any change")

	// A second terraform run destroys the resource: the re-plan creates
	// it as the approved plan did, with the same digest.
	f.Destroy()
	replan = f.Replan()
	require.Equal(t, string(applied.Spec.PlanDigest), replan.Report.PlanDigest, "the re-plan is the approved plan again")
	revert := revertOf(applied, replan.Report.PlanDigest, replan.Report.PlanFileSHA256)
	require.Equal(t, applied.Spec.ApprovalDigest, revert.Spec.ApprovalDigest)
	d = decide(t, f, revert)
	require.True(t, d.Passed, d.Message)
	require.Equal(t, sluicev1.ReasonReappliesApproved, d.Reason, d.Message)
	require.Contains(t, d.Message, "re-applies "+applied.Name)
}
