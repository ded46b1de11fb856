package gate

import (
	"strings"
	"testing"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestGate_reapplyOfTheAppliedDigest: a drift revert (a new change whose
// approvalDigest is the one its Release applied) passes without a new
// approval and says why; every other change is judged as before.
func TestGate_reapplyOfTheAppliedDigest(t *testing.T) {
	applied := change()
	appliedRel := func(r *sluicev1.Release) {
		r.Status.AppliedDigest = applied.Spec.ApprovalDigest
		r.Status.AppliedChange = applied.Name
		r.Status.AppliedRevision = applied.Spec.Revision
		r.Status.AppliedTargetNamespace = "checkout-prod"
		r.Status.AppliedRule = &sluicev1.ApprovalRule{Required: 2}
	}
	revert := func(c *sluicev1.ChangeRequest) { c.Name = applied.Name + "-r2"; c.Spec.Attempt = 2 }
	for _, tt := range []struct {
		name   string
		rel    sluicev1.Release
		cr     *sluicev1.ChangeRequest
		reason string
	}{
		{"a re-plan with the applied digest passes without approvals",
			release("checkout-prod", "prod", "checkout-prod", appliedRel), change(revert), sluicev1.ReasonReappliesApproved},
		{"other content waits for approvals",
			release("checkout-prod", "prod", "checkout-prod", appliedRel), change(revert, func(c *sluicev1.ChangeRequest) { c.Spec.ContentDigest = contentB }), sluicev1.ReasonAwaitingApprovals},
		{"a chart that renders differently today waits for approvals",
			release("checkout-prod", "prod", "checkout-prod", appliedRel), change(revert, func(c *sluicev1.ChangeRequest) {
				c.Spec.ManifestDigest = sluicev1.SHA256Digest([]byte("rendered today"))
			}), sluicev1.ReasonAwaitingApprovals},
		{"a release that applied nothing has nothing to re-apply",
			release("checkout-prod", "prod", "checkout-prod"), change(revert), sluicev1.ReasonAwaitingApprovals},
		{"a deny finding still rejects it",
			release("checkout-prod", "prod", "checkout-prod", appliedRel), change(revert, func(c *sluicev1.ChangeRequest) {
				c.Spec.Verdict.Findings = []sluicev1.Finding{{Policy: "p", Severity: sluicev1.SeverityDeny, Message: "m"}}
				c.Spec.Verdict.Result = sluicev1.VerdictFail
			}), sluicev1.ReasonPolicyDenied},
		{"a delete of the applied release is no re-apply",
			release("checkout-prod", "prod", "checkout-prod", appliedRel), change(revert, func(c *sluicev1.ChangeRequest) { c.Spec.Operation = sluicev1.OperationDelete }), sluicev1.ReasonAwaitingApprovals},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if tt.cr.Spec.Operation != sluicev1.OperationDelete && tt.cr.Spec.ContentDigest == applied.Spec.ContentDigest && tt.cr.Spec.ManifestDigest == applied.Spec.ManifestDigest && tt.cr.Spec.ApprovalDigest != applied.Spec.ApprovalDigest {
				t.Fatalf("test setup: the revert's digest %s differs from the applied %s", tt.cr.Spec.ApprovalDigest, applied.Spec.ApprovalDigest)
			}
			in := Inputs{Release: &tt.rel, Releases: []sluicev1.Release{tt.rel}}
			d, errs := Decide(in, tt.cr, nil)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if d.Reason != tt.reason {
				t.Fatalf("reason %s (%s), want %s", d.Reason, d.Message, tt.reason)
			}
			if want := tt.reason == sluicev1.ReasonReappliesApproved; d.Passed != want {
				t.Fatalf("passed %v, want %v", d.Passed, want)
			}
		})
	}
}

// TestGate_aDriftRevertThatDoesNotReproduceTheDigestSaysWhy: a drift
// revert (the re-plan the drift controller asked for) whose digest is not
// the applied one waits for approval, and the gate says it is a revert
// that became a new plan; a change that is no revert keeps the usual
// message.
func TestGate_aDriftRevertThatDoesNotReproduceTheDigestSaysWhy(t *testing.T) {
	applied := change()
	rel := release("checkout-prod", "prod", "checkout-prod", func(r *sluicev1.Release) {
		r.Status.AppliedDigest, r.Status.AppliedChange = applied.Spec.ApprovalDigest, applied.Name
	})
	replanned := func(c *sluicev1.ChangeRequest) {
		c.Name = applied.Name + "-r2"
		c.Spec.Attempt = 2
		c.Spec.PlanDigest = sluicev1.SHA256Digest([]byte("a plan that updates the drifted resource back"))
		c.Spec.ApprovalDigest = c.ExpectedApprovalDigest()
	}
	in := Inputs{Release: &rel, Releases: []sluicev1.Release{rel}}

	revert := change(replanned, func(c *sluicev1.ChangeRequest) {
		c.Annotations = map[string]string{sluicev1.AnnotationReplan: sluicev1.DriftRevertPrefix + applied.Name}
	})
	d, errs := Decide(in, revert, nil)
	if len(errs) > 0 || d.Passed || d.Reason != sluicev1.ReasonAwaitingApprovals {
		t.Fatalf("decision %+v %v, want it waiting for approvals", d, errs)
	}
	for _, want := range []string{"drift revert of " + applied.Name, string(revert.Spec.ApprovalDigest), "not the applied " + string(applied.Spec.ApprovalDigest), "needs approval like any change"} {
		if !strings.Contains(d.Message, want) {
			t.Fatalf("message %q lacks %q", d.Message, want)
		}
	}

	plain, errs := Decide(in, change(replanned), nil)
	if len(errs) > 0 || plain.Passed || strings.Contains(plain.Message, "drift revert") {
		t.Fatalf("a re-plan that is no revert: %+v %v", plain, errs)
	}
}
