package gate

import (
	"slices"
	"strings"
	"testing"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// FuzzEvaluate feeds the gate arbitrary approver identities, groups, rules
// and decisions (all of which come from users or pull requests) and checks
// that it never panics and never counts someone the rule does not allow.
func FuzzEvaluate(f *testing.F) {
	f.Add("k8s:alice", "sre,dev", byte(0), true, "k8s-group:sre,github:bob", "k8s:alice", uint8(1), false, byte(1), byte(1))
	f.Add("github:dave", "", byte(0), false, "", "", uint8(0), true, byte(3), byte(3))
	f.Add("k8s-group:sre", "sre", byte(1), true, "k8s-group:sre", "k8s-group:sre", uint8(2), false, byte(0), byte(2))
	f.Add("", ",,", byte(2), true, ",", "github:x,,k8s:", uint8(100), true, byte(9), byte(9))
	f.Fuzz(func(t *testing.T, approver, groups string, decision byte, kube bool, listA, listB string, required uint8, allowAuthor bool, auto, risk byte) {
		split := func(s string) []sluicev1.Identity {
			var out []sluicev1.Identity
			for _, x := range strings.Split(s, ",") {
				if x != "" {
					out = append(out, sluicev1.Identity(x))
				}
			}
			return out
		}
		autos := []sluicev1.AutoApproveRisk{sluicev1.AutoApproveNone, sluicev1.AutoApproveLow, sluicev1.AutoApproveMedium, sluicev1.AutoApproveHigh, ""}
		risks := []sluicev1.Risk{sluicev1.RiskLow, sluicev1.RiskMedium, sluicev1.RiskHigh, ""}
		decisions := []sluicev1.Decision{sluicev1.DecisionApprove, sluicev1.DecisionReject, sluicev1.DecisionRevoke, "bogus"}
		rule := Strictest(
			Source{Rule: sluicev1.ApprovalRule{Required: int32(required), Approvers: split(listA), AllowAuthor: allowAuthor, AutoApproveRisk: autos[int(auto)%len(autos)]}},
			Source{Rule: sluicev1.ApprovalRule{Approvers: split(listB), AllowAuthor: true, AutoApproveRisk: sluicev1.AutoApproveHigh}},
		)
		cr := change(func(c *sluicev1.ChangeRequest) { c.Spec.Verdict.Risk = risks[int(risk)%len(risks)] })
		src := sluicev1.SourcePullRequest
		if kube {
			src = sluicev1.SourceKubernetes
		}
		var gs []string
		for _, g := range strings.Split(groups, ",") {
			if g != "" {
				gs = append(gs, g)
			}
		}
		approvals := []sluicev1.Approval{
			approval("a1", approver, decisions[int(decision)%len(decisions)], 1, func(a *sluicev1.Approval) { a.Spec.Groups = gs; a.Spec.Source = src }),
			approval("a2", "github:alice", sluicev1.DecisionApprove, 2),
		}
		d := Evaluate(cr, rule, approvals)
		if d.Passed && (len(d.RejectedBy) > 0 || d.DenyFindings > 0) {
			t.Fatalf("passed with a veto or a deny finding: %+v", d)
		}
		if rule.NoApprovers && len(d.ApprovedBy) > 0 {
			t.Fatalf("counted %v although nobody may approve", d.ApprovedBy)
		}
		for _, id := range d.ApprovedBy {
			a := approvals[slices.IndexFunc(approvals, func(a sluicev1.Approval) bool { return a.Spec.Approver == id })]
			if !rule.Allows(id, a.Spec.Groups, a.Spec.Source) {
				t.Fatalf("counted %s, whom the rule does not allow", id)
			}
			if !rule.AllowAuthor && slices.Contains(cr.Spec.Authors, id) {
				t.Fatalf("counted the author %s", id)
			}
			if a.Spec.Decision != sluicev1.DecisionApprove {
				t.Fatalf("counted %s's %s", id, a.Spec.Decision)
			}
		}
		if d.Passed && d.Reason == sluicev1.ReasonApprovalsMet && int32(len(d.ApprovedBy)) < rule.Required {
			t.Fatalf("passed with %d of %d approvals", len(d.ApprovedBy), rule.Required)
		}
	})
}
