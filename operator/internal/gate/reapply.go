package gate

import (
	"fmt"

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
	if d.Passed || d.Rejected() || !Reapplies(rel, cr) {
		return d
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
