package gate

import (
	"strings"
	"testing"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Who may settle an inconclusive verification: an allowed approver; an
// author only to fail it, or to pass it where authors may approve.
func TestMaySettle(t *testing.T) {
	rule := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1, Approvers: ids("k8s:alice", "github:dave")}})
	tests := map[string]struct {
		a    sluicev1.Approval
		ok   bool
		want string
	}{
		"an allowed approver passes it":    {a: approval("s1", "k8s:alice", sluicev1.DecisionVerifyPass, 1), ok: true},
		"an allowed approver fails it":     {a: approval("s2", "k8s:alice", sluicev1.DecisionVerifyFail, 1), ok: true},
		"someone the rule does not allow":  {a: approval("s3", "k8s:mallory", sluicev1.DecisionVerifyPass, 1), want: "does not allow them to approve"},
		"an author may not pass their own": {a: approval("s4", "github:dave", sluicev1.DecisionVerifyPass, 1), want: "they are an author"},
		"an author may fail their own":     {a: approval("s5", "github:dave", sluicev1.DecisionVerifyFail, 1), ok: true},
		"a settle given on another change": {a: approval("s6", "k8s:alice", sluicev1.DecisionVerifyPass, 1, func(a *sluicev1.Approval) { a.Spec.ChangeRequest = "checkout-prod-other" }), want: "another change"},
		"an approve is no settle":          {a: approval("s7", "k8s:alice", sluicev1.DecisionApprove, 1), want: "no settle"},
		"a settle of another content":      {a: approval("s8", "k8s:alice", sluicev1.DecisionVerifyPass, 1, func(a *sluicev1.Approval) { a.Spec.ApprovalDigest = contentB }), want: "another change"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			ok, why := MaySettle(change(), rule, People{}, &tt.a)
			if ok != tt.ok || !strings.Contains(why, tt.want) {
				t.Fatalf("MaySettle = %v, %q; want %v saying %q", ok, why, tt.ok, tt.want)
			}
		})
	}
}

// A settle is no decision on the change: it neither counts as an
// approve nor takes an approver's approve back.
func TestEvaluate_ignoresSettles(t *testing.T) {
	rule := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1}})
	d := Evaluate(change(), rule, []sluicev1.Approval{
		approval("a1", "k8s:alice", sluicev1.DecisionApprove, 1),
		approval("s1", "k8s:alice", sluicev1.DecisionVerifyFail, 2),
	})
	if !d.Passed || len(d.ApprovedBy) != 1 {
		t.Fatalf("decision = %+v", d)
	}
}
