package v1alpha1

import "strings"

// ConditionRolledBack (Release): the operator's rollback decision after a
// change failed its verification. True when a rollback to the last
// verified change was asked of the syncer, False when there is none (the
// reason says why).
const ConditionRolledBack = "RolledBack"

// Reasons of the RolledBack condition and of RollbackDecision.
const (
	// ReasonRollbackRequested: a rollback to the last verified change was
	// asked of the syncer.
	ReasonRollbackRequested = "RollbackRequested"
	// ReasonNothingVerified: nothing of the release was ever verified, so
	// there is nothing to return to.
	ReasonNothingVerified = "NothingVerified"
	// ReasonRollbackOfRollback: the failed change was itself a rollback;
	// rolling back again would flap, a person decides.
	ReasonRollbackOfRollback = "RollbackOfRollback"
	// ReasonNewerChange: a newer change of the release is waiting or was
	// applied after the failed one; it goes first (no flapping).
	ReasonNewerChange = "NewerChange"
	// ReasonRollbackDeclined: the syncer could not build the rollback
	// (the revision or the artifact is gone, or a fresh Terraform plan
	// destroys something); a person decides.
	ReasonRollbackDeclined = "RollbackDeclined"
	// ReasonRollbackAuto: the gate passed a rollback without approvals
	// because the rule says rollback: auto and its content is exactly the
	// verified content it returns to.
	ReasonRollbackAuto = "RollbackAutoApproved"
)

// RollbackAnnotation is the Release annotation that asks the syncer for a
// rollback of the failed change of.
func RollbackAnnotation(of string) string { return AnnotationRollbackPrefix + of }

// RollbackRequests returns the rollback requests of a Release's
// annotations: failed change → verified change to return to.
func RollbackRequests(annotations map[string]string) map[string]string {
	var out map[string]string
	for k, v := range annotations {
		of, ok := strings.CutPrefix(k, AnnotationRollbackPrefix)
		if !ok || of == "" || v == "" {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[of] = v
	}
	return out
}

// IsRollback reports whether the change is a rollback.
func (c *ChangeRequest) IsRollback() bool { return c.Spec.Rollback != nil }

// Quarantined returns the quarantine entry that catches the change: one
// with its approvalDigest or its content digest; nil when none does.
func (r *Release) Quarantined(c *ChangeRequest) *QuarantineEntry {
	for i := range r.Status.Quarantine {
		q := &r.Status.Quarantine[i]
		if q.ApprovalDigest == c.Spec.ApprovalDigest || (q.ContentDigest != "" && q.ContentDigest == c.Spec.ContentDigest) {
			return q
		}
	}
	return nil
}
