package gate

import (
	"fmt"
	"strings"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Reapplies reports whether a change re-applies exactly what its Release
// has applied: an Apply (not a preview) whose approvalDigest is the
// Release's status.appliedDigest. The digest covers the release, the
// content, the rendered manifests and the Terraform plan, so such a change
// puts back what was approved already (a drift revert); anything else,
// a re-render that differs or a plan that changes something, has another
// digest and is judged like every change.
func Reapplies(rel *sluicev1.Release, cr *sluicev1.ChangeRequest) bool {
	if rel == nil || cr == nil || rel.Status.AppliedDigest == "" {
		return false
	}
	if cr.Spec.Operation == sluicev1.OperationDelete || (cr.Spec.PullRequest != nil && cr.Spec.PullRequest.Preview) {
		return false
	}
	return cr.Spec.ApprovalDigest == rel.Status.AppliedDigest && rel.Name == cr.Spec.Release
}

// reapplied lets a change through that Reapplies its Release's applied
// digest when the rest of the gate would keep it waiting for approvals.
// Terminal verdicts stay: a digest mismatch, a deny finding or a standing
// reject for the digest still stop it.
func reapplied(d Decision, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) Decision {
	if d.Passed || d.Rejected() {
		return d
	}
	if !Reapplies(rel, cr) {
		return revertNeedsApproval(d, rel, cr)
	}
	d.Passed = true
	d.Reason = sluicev1.ReasonReappliesApproved
	applied := rel.Status.AppliedChange
	if applied == "" {
		applied = "the applied change"
	}
	d.Message = fmt.Sprintf("re-applies %s (revision %s): the same approvalDigest %s passed the gate before, so no new approval is needed", applied, rel.Status.AppliedRevision, cr.Spec.ApprovalDigest)
	return d
}

// revertNeedsApproval says, on a drift revert whose re-plan did not
// reproduce the applied approvalDigest, why it waits for approval like
// any change: a Terraform re-plan against a drifted state plans the moves
// back to the approved configuration, which is a plan nobody approved (it
// may replace or destroy what the approved plan only created), and a
// chart may render otherwise today.
func revertNeedsApproval(d Decision, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) Decision {
	of, revert := strings.CutPrefix(cr.Annotations[sluicev1.AnnotationReplan], sluicev1.DriftRevertPrefix)
	if !revert || rel == nil || d.Reason != sluicev1.ReasonAwaitingApprovals {
		return d
	}
	d.Message = fmt.Sprintf("drift revert of %s: its re-plan has approvalDigest %s, not the applied %s (a Terraform plan that moves drifted resources back, or a chart that renders otherwise today, is a new plan), so it needs approval like any change; %s",
		of, cr.Spec.ApprovalDigest, orNone(string(rel.Status.AppliedDigest)), d.Message)
	return d
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
