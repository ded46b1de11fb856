package gate

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Rollbacks and quarantine.
//
// A change whose approvalDigest or content digest is in its Release's
// quarantine (a change with it failed verification) is judged by a rule
// with auto-approval off and at least one approval required: no auto path
// (risk, re-apply, rollback) lets it through.
//
// A rollback (spec.rollback, which is digested) passes without approvals
// only when the effective rule says rollback: auto, the operator decided
// exactly this rollback (Release status.rollback), it returns to the
// Release's last verified change, its content is exactly that change's
// (content and manifest digests, source, namespace, delivery and
// verification), and, for Terraform, its fresh plan destroys and replaces
// nothing.

// quarantineRule is the rule a quarantined change is judged by: rule with
// auto-approval and rollback auto off and at least one approval required.
func quarantineRule(rule Rule) Rule {
	rule.AutoApproveRisk = sluicev1.AutoApproveNone
	rule.RollbackAuto = false
	if rule.Required < 1 {
		rule.Required = 1
	}
	return rule
}

// quarantined says in the decision's message why a quarantined change was
// judged strictly.
func quarantined(d Decision, q *sluicev1.QuarantineEntry) Decision {
	if d.Rejected() {
		return d
	}
	d.Message = fmt.Sprintf("quarantined: verification of %s failed (same approvalDigest or content), so it is never auto-approved and needs at least 1 explicit approval; %s", q.ChangeRequest, d.Message)
	return d
}

// RollbackRefusal says why a rollback cannot pass without approvals; ""
// when it can. to is the change it claims to return to (nil when missing).
func RollbackRefusal(rule Rule, rel *sluicev1.Release, cr, to *sluicev1.ChangeRequest) string {
	rb := cr.Spec.Rollback
	switch {
	case rb == nil:
		return "it is no rollback"
	case !rule.RollbackAuto:
		return "the effective rule says rollback=approval"
	case rel == nil || rel.Status.Rollback == nil || rel.Status.Rollback.Of != rb.Of || rel.Status.Rollback.To != rb.To || !rel.Status.Rollback.Requested:
		return fmt.Sprintf("the operator did not ask for a rollback of %s to %s on Release %s", rb.Of, rb.To, cr.Spec.Release)
	case rel.Status.LastVerified == nil || rel.Status.LastVerified.ChangeRequest != rb.To:
		return fmt.Sprintf("%s is not the release's last verified change", rb.To)
	case to == nil || to.Name != rb.To:
		return fmt.Sprintf("the verified change %s is gone", rb.To)
	case to.Status.Phase != sluicev1.PhaseVerified || to.Spec.Release != cr.Spec.Release || to.Namespace != cr.Namespace:
		return fmt.Sprintf("%s is not a Verified change of release %s", rb.To, cr.Spec.Release)
	case to.Spec.ApprovalDigest != rel.Status.LastVerified.ApprovalDigest:
		return fmt.Sprintf("%s does not have the approvalDigest recorded as verified", rb.To)
	}
	if why := sameContent(cr, to); why != "" {
		return fmt.Sprintf("its content is not exactly the verified content of %s: %s", rb.To, why)
	}
	if ps := cr.Spec.PlanSummary; ps != nil && (ps.Destroy > 0 || ps.Replace > 0) {
		return fmt.Sprintf("its fresh Terraform plan destroys %d and replaces %d resource(s)", ps.Destroy, ps.Replace)
	}
	if src := cr.Spec.Source; src != nil && src.Terraform != nil && cr.Spec.PlanSummary == nil {
		return "its Terraform plan has no summary to check for destroys"
	}
	return ""
}

// rollbackRefusal is RollbackRefusal; the attack test removes it to show
// what it guards against.
var rollbackRefusal = RollbackRefusal

// sameContent says how a rollback's content differs from the verified
// change's; "" when it is the same.
func sameContent(cr, to *sluicev1.ChangeRequest) string {
	a, b := &cr.Spec, &to.Spec
	switch {
	case a.Operation == sluicev1.OperationDelete || b.Operation == sluicev1.OperationDelete:
		return "a rollback applies, it never deletes"
	case a.ContentDigest != b.ContentDigest:
		return fmt.Sprintf("content %s, verified %s", a.ContentDigest, b.ContentDigest)
	case a.ManifestDigest != b.ManifestDigest:
		return fmt.Sprintf("manifest %s, verified %s", orNone(string(a.ManifestDigest)), orNone(string(b.ManifestDigest)))
	case a.TargetNamespace != b.TargetNamespace || a.Delivery.OrDefault() != b.Delivery.OrDefault():
		return "another target namespace or delivery"
	case !equality.Semantic.DeepEqual(a.Source, b.Source):
		return "another source (folder, chart, values or Terraform stack)"
	case sluicev1.VerificationDigest(a.Verification) != sluicev1.VerificationDigest(b.Verification):
		return "another verification"
	}
	return ""
}

// rolledBack lets a rollback through that RollbackRefusal has nothing
// against when the rest of the gate would keep it waiting, and says on a
// waiting one why it waits.
func rolledBack(d Decision, in Inputs, cr *sluicev1.ChangeRequest) Decision {
	rb := cr.Spec.Rollback
	if rb == nil || d.Rejected() {
		return d
	}
	if d.Passed {
		d.Message = fmt.Sprintf("rollback of %s to verified %s: %s", rb.Of, rb.To, d.Message)
		return d
	}
	if why := rollbackRefusal(d.Rule, in.Release, cr, in.RollbackTarget); why != "" {
		d.Message = fmt.Sprintf("rollback of %s to verified %s waits for approval: %s; %s", rb.Of, rb.To, why, d.Message)
		return d
	}
	d.Passed = true
	d.Reason = sluicev1.ReasonRollbackAuto
	d.Message = fmt.Sprintf("rollback of %s to verified %s: rule rollback=auto, and its content is exactly the verified content of %s (content %s)", rb.Of, rb.To, rb.To, cr.Spec.ContentDigest)
	return d
}
