package gate

import (
	"fmt"
	"slices"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// MaySettle decides whether Approval a (decision verify-pass or
// verify-fail) may settle the inconclusive verification of cr under the
// effective rule: it must name cr itself and come from someone the rule
// allows to approve; a pass from an author counts only where the rule
// lets authors approve (like an approve), a fail from an author always
// (like a reject: anyone may stop their own change). When it may not, the
// reason says why, for the change's status.
func MaySettle(cr *sluicev1.ChangeRequest, rule Rule, people People, a *sluicev1.Approval) (bool, string) {
	id := a.Spec.Approver
	switch {
	case !a.Spec.Decision.Settles():
		return false, fmt.Sprintf("%s is no settle", a.Spec.Decision)
	case a.Spec.ChangeRequest != cr.Name || a.Spec.Release != cr.Spec.Release || a.Spec.ApprovalDigest != cr.Spec.ApprovalDigest:
		return false, fmt.Sprintf("%s by %s was given on another change", a.Spec.Decision, id)
	}
	var buf [8]sluicev1.Identity
	author := slices.Contains(authorKeys(buf[:0], cr, people), people.Key(id))
	allowed := rule.Allows(id, a.Spec.Groups, a.Spec.Source)
	switch {
	case a.Spec.Decision == sluicev1.DecisionVerifyFail && (allowed || author):
		return true, ""
	case !allowed:
		return false, fmt.Sprintf("%s by %s does not count: the effective rule (%s) does not allow them to approve", a.Spec.Decision, id, rule)
	case author && !rule.AllowAuthor:
		return false, fmt.Sprintf("%s by %s does not count: they are an author of the change and the rule excludes authors", a.Spec.Decision, id)
	}
	return true, ""
}
