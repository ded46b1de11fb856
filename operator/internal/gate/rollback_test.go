package gate

import (
	"strings"
	"testing"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestStrictest_rollbackApprovalBeatsAuto(t *testing.T) {
	auto := sluicev1.ApprovalRule{Rollback: sluicev1.RollbackAuto}
	tests := []struct {
		name    string
		sources []sluicev1.ApprovalRule
		want    bool
	}{
		{"every source says auto", []sluicev1.ApprovalRule{auto, auto}, true},
		{"one source says approval", []sluicev1.ApprovalRule{auto, {Rollback: sluicev1.RollbackApproval}}, false},
		{"one source leaves it out (approval is the default)", []sluicev1.ApprovalRule{auto, {}}, false},
		{"no source at all", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var src []Source
			for _, r := range tt.sources {
				src = append(src, Source{Origin: "test", Rule: r})
			}
			got := Strictest(src...)
			if got.RollbackAuto != tt.want {
				t.Fatalf("RollbackAuto = %v, want %v", got.RollbackAuto, tt.want)
			}
			if api := got.API(); Strictest(Source{Rule: api}).RollbackAuto != tt.want {
				t.Fatalf("API() %+v does not round-trip rollback", api)
			}
		})
	}
}

// rollbackFixture is a release whose change checkout-prod-bad failed its
// verification, with checkout-prod-good its last verified change and the
// operator's decision to roll back to it.
type rollbackFixture struct {
	rel  *sluicev1.Release
	good *sluicev1.ChangeRequest
	bad  *sluicev1.ChangeRequest
}

const (
	goodName = "checkout-prod-good000000"
	badName  = "checkout-prod-bad0000000"
)

func newRollbackFixture() rollbackFixture {
	good := change(func(c *sluicev1.ChangeRequest) {
		c.Name = goodName
		c.Spec.Rule.Rollback = sluicev1.RollbackAuto
	})
	good.Status.Phase = sluicev1.PhaseVerified
	bad := change(func(c *sluicev1.ChangeRequest) {
		c.Name = badName
		c.Spec.ContentDigest = contentB
		c.Spec.Revision = "b" + c.Spec.Revision[1:]
	})
	bad.Status.Phase = sluicev1.PhaseVerificationFailed
	rel := &sluicev1.Release{}
	rel.Name, rel.Namespace = "checkout-prod", ns
	rel.Status.AppliedChange, rel.Status.AppliedDigest, rel.Status.AppliedTargetNamespace = bad.Name, bad.Spec.ApprovalDigest, "checkout-prod"
	rel.Status.LastVerified = &sluicev1.VerifiedChange{ChangeRequest: good.Name, Revision: good.Spec.Revision, ApprovalDigest: good.Spec.ApprovalDigest, ContentDigest: good.Spec.ContentDigest}
	rel.Status.Quarantine = []sluicev1.QuarantineEntry{{ChangeRequest: bad.Name, ApprovalDigest: bad.Spec.ApprovalDigest, ContentDigest: bad.Spec.ContentDigest}}
	rel.Status.Rollback = &sluicev1.RollbackDecision{Of: bad.Name, To: good.Name, Requested: true, Reason: sluicev1.ReasonRollbackRequested}
	return rollbackFixture{rel: rel, good: good, bad: bad}
}

// rollbackChange is the syncer's rollback of bad to good: good's content
// and rule at good's revision, attempt 2, claiming the rollback.
func (f rollbackFixture) rollbackChange(mod ...func(*sluicev1.ChangeRequest)) *sluicev1.ChangeRequest {
	return change(append([]func(*sluicev1.ChangeRequest){func(c *sluicev1.ChangeRequest) {
		c.Name = goodName + "-r2"
		c.Spec.Revision = f.good.Spec.Revision
		c.Spec.Attempt = 2
		c.Spec.Rule.Rollback = sluicev1.RollbackAuto
		c.Spec.Rollback = &sluicev1.RollbackSpec{Of: badName, To: goodName}
	}}, mod...)...)
}

func approveOn(cr *sluicev1.ChangeRequest, approver string) sluicev1.Approval {
	a := approval("a-"+approver, approver, sluicev1.DecisionApprove, 1)
	a.Spec.ChangeRequest, a.Spec.ApprovalDigest = cr.Name, cr.Spec.ApprovalDigest
	return a
}

func TestGate_rollback(t *testing.T) {
	tfSource := func(c *sluicev1.ChangeRequest) {
		c.Spec.Source.Terraform = &sluicev1.TerraformSource{Dir: "services/checkout/terraform"}
		c.Spec.PlanDigest = sluicev1.SHA256Digest([]byte("fresh plan"))
		c.Spec.PlanSummary = &sluicev1.PlanSummary{Change: 1}
	}
	tests := []struct {
		name string
		// setup changes the fixture and returns the change to judge and
		// its Approvals.
		setup       func(f *rollbackFixture, in *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval)
		passed      bool
		reason      string
		wantMessage string
	}{
		{
			name: "an exact rollback to the last verified content under rollback: auto passes without approvals, and says why",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				return f.rollbackChange(), nil
			},
			passed: true, reason: sluicev1.ReasonRollbackAuto,
			wantMessage: "rollback of " + badName + " to verified " + goodName + ": rule rollback=auto",
		},
		{
			name: "a rollback under rollback: approval waits for approvals",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				return f.rollbackChange(func(c *sluicev1.ChangeRequest) { c.Spec.Rule.Rollback = sluicev1.RollbackApproval }), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "the effective rule says rollback=approval",
		},
		{
			name: "an ApprovalPolicy that says approval beats the manifest's auto",
			setup: func(f *rollbackFixture, in *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				in.Policies = []sluicev1.ApprovalPolicy{{Spec: sluicev1.ApprovalPolicySpec{Rule: sluicev1.ApprovalRule{Required: 1}}}}
				in.Policies[0].Name, in.Policies[0].Namespace = "floor", ns
				return f.rollbackChange(), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "rollback=approval",
		},
		{
			name: "a rollback under rollback: approval passes with the approvals its rule needs",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				cr := f.rollbackChange(func(c *sluicev1.ChangeRequest) { c.Spec.Rule = sluicev1.ApprovalRule{Required: 1} })
				return cr, []sluicev1.Approval{approveOn(cr, "k8s:erin")}
			},
			passed: true, reason: sluicev1.ReasonApprovalsMet, wantMessage: "rollback of " + badName + " to verified " + goodName + ": approved by k8s:erin",
		},
		{
			name: "a rollback whose content differs from the verified content waits",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				return f.rollbackChange(func(c *sluicev1.ChangeRequest) { c.Spec.ContentDigest = sluicev1.SHA256Digest([]byte("content c")) }), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "its content is not exactly the verified content of " + goodName,
		},
		{
			name: "a rollback whose chart renders otherwise today waits",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				return f.rollbackChange(func(c *sluicev1.ChangeRequest) { c.Spec.ManifestDigest = sluicev1.SHA256Digest([]byte("other render")) }), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "manifest sha256:",
		},
		{
			name: "a rollback with another verification waits",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				return f.rollbackChange(func(c *sluicev1.ChangeRequest) { c.Spec.Verification = &sluicev1.VerificationSpec{} }), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "another verification",
		},
		{
			name: "a Terraform rollback whose fresh plan changes only in place passes",
			setup: func(f *rollbackFixture, in *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				tfGood := f.good.DeepCopy()
				tfSource(tfGood)
				tfGood.Spec.ApprovalDigest = tfGood.ExpectedApprovalDigest()
				in.RollbackTarget = tfGood
				f.rel.Status.LastVerified.ApprovalDigest = tfGood.Spec.ApprovalDigest
				return f.rollbackChange(tfSource), nil
			},
			passed: true, reason: sluicev1.ReasonRollbackAuto, wantMessage: "rule rollback=auto",
		},
		{
			name: "a Terraform rollback whose fresh plan destroys something waits",
			setup: func(f *rollbackFixture, in *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				tfGood := f.good.DeepCopy()
				tfSource(tfGood)
				in.RollbackTarget = tfGood
				return f.rollbackChange(tfSource, func(c *sluicev1.ChangeRequest) { c.Spec.PlanSummary = &sluicev1.PlanSummary{Destroy: 1} }), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "its fresh Terraform plan destroys 1 and replaces 0",
		},
		{
			name: "a Terraform rollback whose fresh plan replaces something waits",
			setup: func(f *rollbackFixture, in *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				tfGood := f.good.DeepCopy()
				tfSource(tfGood)
				in.RollbackTarget = tfGood
				return f.rollbackChange(tfSource, func(c *sluicev1.ChangeRequest) { c.Spec.PlanSummary = &sluicev1.PlanSummary{Replace: 2} }), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "destroys 0 and replaces 2",
		},
		{
			name: "a Terraform rollback without a plan summary waits",
			setup: func(f *rollbackFixture, in *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				tfGood := f.good.DeepCopy()
				tfSource(tfGood)
				in.RollbackTarget = tfGood
				return f.rollbackChange(tfSource, func(c *sluicev1.ChangeRequest) { c.Spec.PlanSummary = nil }), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "no summary",
		},
		{
			name: "a rollback to a change that is not the last verified one waits",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				f.rel.Status.LastVerified.ChangeRequest = "checkout-prod-newer00000"
				return f.rollbackChange(), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "is not the release's last verified change",
		},
		{
			name: "a rollback whose verified change is gone waits",
			setup: func(f *rollbackFixture, in *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				in.RollbackTarget = nil
				return f.rollbackChange(), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "is gone",
		},
		{
			name: "a rollback to a change that was never Verified waits",
			setup: func(f *rollbackFixture, in *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				in.RollbackTarget.Status.Phase = sluicev1.PhaseApplied
				return f.rollbackChange(), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "is not a Verified change",
		},
		{
			name: "a rollback the operator did not decide waits",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				f.rel.Status.Rollback = nil
				return f.rollbackChange(), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "the operator did not ask for a rollback",
		},
		{
			name: "a rollback of another failed change than the one decided waits",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				return f.rollbackChange(func(c *sluicev1.ChangeRequest) { c.Spec.Rollback.Of = "checkout-prod-other00000" }), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "the operator did not ask",
		},
		{
			name: "a change that claims to be a rollback without the claim in its digest is rejected",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				cr := f.rollbackChange()
				cr.Spec.ApprovalDigest = sluicev1.ComputeChangeApprovalDigest(cr.Namespace, cr.Spec.Release, cr.Spec.Operation,
					cr.Spec.ContentDigest, cr.Spec.ManifestDigest, cr.Spec.PlanDigest, sluicev1.VerificationDigest(cr.Spec.Verification))
				return cr, nil
			},
			reason: sluicev1.ReasonDigestMismatch,
		},
		{
			name: "the failed content pushed again is not auto-approved by risk and says why",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				return change(func(c *sluicev1.ChangeRequest) {
					c.Name = "checkout-prod-again00000"
					c.Spec.ContentDigest = contentB
					c.Spec.Revision = "c" + c.Spec.Revision[1:]
					c.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveHigh}
				}), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "quarantined: verification of " + badName + " failed",
		},
		{
			name: "the failed content pushed again passes with one explicit approval",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				cr := change(func(c *sluicev1.ChangeRequest) {
					c.Name = "checkout-prod-again00000"
					c.Spec.ContentDigest = contentB
					c.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveHigh}
				})
				return cr, []sluicev1.Approval{approveOn(cr, "k8s:erin")}
			},
			passed: true, reason: sluicev1.ReasonApprovalsMet, wantMessage: "quarantined",
		},
		{
			name: "a re-apply of the failed digest (a drift revert) is not let through",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				return f.bad.DeepCopy(), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "quarantined: verification of " + badName,
		},
		{
			name: "a rollback whose content is quarantined needs an approval",
			setup: func(f *rollbackFixture, _ *Inputs) (*sluicev1.ChangeRequest, []sluicev1.Approval) {
				f.rel.Status.Quarantine = append(f.rel.Status.Quarantine, sluicev1.QuarantineEntry{ChangeRequest: "checkout-prod-older00000", ApprovalDigest: f.good.Spec.ApprovalDigest, ContentDigest: contentA})
				return f.rollbackChange(), nil
			},
			reason: sluicev1.ReasonAwaitingApprovals, wantMessage: "quarantined: verification of checkout-prod-older00000 failed",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newRollbackFixture()
			in := Inputs{Release: f.rel, RollbackTarget: f.good}
			cr, approvals := tt.setup(&f, &in)
			d, errs := Decide(in, cr, approvals)
			if len(errs) > 0 {
				t.Fatalf("rule errors: %v", errs)
			}
			if d.Passed != tt.passed || d.Reason != tt.reason {
				t.Fatalf("Decide = passed %v reason %s (%s), want passed %v reason %s", d.Passed, d.Reason, d.Message, tt.passed, tt.reason)
			}
			if !strings.Contains(d.Message, tt.wantMessage) {
				t.Fatalf("message %q does not say %q", d.Message, tt.wantMessage)
			}
		})
	}
}

// Attack: a change that claims to be a rollback (spec.rollback) of the
// failed change, back to content that was never verified (here the
// failed content itself, under a rule that says rollback: auto, as a
// pusher may write approval.rollback: auto in service.yaml). With the
// guard removed (RollbackRefusal) the claim would pass without a single
// approval; with it the change waits and the message says why. The same
// rule on a change that claims nothing never takes the rollback path.
func TestGate_forgedRollbackClaimsNeedTheGuard(t *testing.T) {
	f := newRollbackFixture()
	// The release as a pusher would like it: the rollback decision
	// stands, but the claimed target is not what was verified.
	forged := change(func(c *sluicev1.ChangeRequest) {
		c.Name = "checkout-prod-forged0000"
		c.Spec.ContentDigest = sluicev1.SHA256Digest([]byte("never verified"))
		c.Spec.Revision = "f" + c.Spec.Revision[1:]
		c.Spec.Rule = sluicev1.ApprovalRule{Required: 2, Rollback: sluicev1.RollbackAuto}
		c.Spec.Rollback = &sluicev1.RollbackSpec{Of: badName, To: goodName}
	})
	plain := change(func(c *sluicev1.ChangeRequest) {
		c.Name = "checkout-prod-plain00000"
		c.Spec.ContentDigest = sluicev1.SHA256Digest([]byte("a plain push"))
		c.Spec.Rule = sluicev1.ApprovalRule{Required: 2, Rollback: sluicev1.RollbackAuto}
	})
	in := Inputs{Release: f.rel, RollbackTarget: f.good}

	defer func(g func(Rule, *sluicev1.Release, *sluicev1.ChangeRequest, *sluicev1.ChangeRequest) string) {
		rollbackRefusal = g
	}(rollbackRefusal)
	rollbackRefusal = func(Rule, *sluicev1.Release, *sluicev1.ChangeRequest, *sluicev1.ChangeRequest) string { return "" }
	if d, _ := Decide(in, forged, nil); !d.Passed {
		t.Fatalf("without the guard the forged rollback should pass (the attack works): %s %s", d.Reason, d.Message)
	}
	rollbackRefusal = RollbackRefusal
	d, _ := Decide(in, forged, nil)
	if d.Passed || !strings.Contains(d.Message, "its content is not exactly the verified content of "+goodName) {
		t.Fatalf("with the guard the forged rollback passed or says nothing: passed=%v %s %s", d.Passed, d.Reason, d.Message)
	}
	if d, _ := Decide(in, plain, nil); d.Passed || d.Reason == sluicev1.ReasonRollbackAuto {
		t.Fatalf("rollback: auto let a change that is no rollback pass: %s %s", d.Reason, d.Message)
	}
}
