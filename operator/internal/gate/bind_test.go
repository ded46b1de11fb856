package gate

import (
	"slices"
	"strings"
	"testing"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestGate_anApproveCountsOnlyForTheChangeItWasGivenOn is the replay attack
// at the gate: an approver approved content D4 in one change; a later
// change that brings D4 back (a push of the old replicas after a newer
// release) has the same approvalDigest, and the old approve must not let
// it through. Vetoes, in contrast, hold for the content in every change.
func TestGate_anApproveCountsOnlyForTheChangeItWasGivenOn(t *testing.T) {
	one := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1}})
	// later is a new change of the tracked branch at another commit with
	// the content of change() (the same approvalDigest).
	later := func(mod ...func(*sluicev1.ChangeRequest)) *sluicev1.ChangeRequest {
		return change(append([]func(*sluicev1.ChangeRequest){func(c *sluicev1.ChangeRequest) {
			c.Name = "checkout-prod-fedcba9876"
			c.Spec.Revision = strings.Repeat("fedcba9876", 4)
		}}, mod...)...)
	}
	merging := func(prs ...int64) func(*sluicev1.ChangeRequest) {
		return func(c *sluicev1.ChangeRequest) { c.Spec.MergedPullRequests = prs }
	}
	preview := func(pr int64) func(*sluicev1.ChangeRequest) {
		return func(c *sluicev1.ChangeRequest) {
			c.Name = sluicev1.PreviewChangeRequestName(c.Spec.Release, pr, "abcdef0123456789")
			c.Spec.PullRequest = &sluicev1.PullRequestRef{Number: pr, HeadSHA: strings.Repeat("abcdef0123", 4), Preview: true}
		}
	}
	on := func(name string) func(*sluicev1.Approval) {
		return func(a *sluicev1.Approval) { a.Spec.ChangeRequest = name }
	}
	review := func(pr int64) func(*sluicev1.Approval) {
		return func(a *sluicev1.Approval) {
			a.Spec.ChangeRequest = sluicev1.PreviewChangeRequestName("checkout-prod", pr, "abcdef0123456789")
			a.Spec.Source, a.Spec.PullRequest, a.Spec.ReviewID = sluicev1.SourcePullRequest, pr, 100+pr
		}
	}
	first := change().Name

	tests := []struct {
		name        string
		cr          *sluicev1.ChangeRequest
		approvals   []sluicev1.Approval
		wantReason  string
		wantIgnored []IgnoreReason
	}{
		{
			name: "an approve of an earlier change with the same content does not count for a later one", cr: later(),
			approvals:   []sluicev1.Approval{approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1, on(first))},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredOtherChange},
		},
		{
			name: "an approve that names no change counts for nothing", cr: change(),
			approvals:   []sluicev1.Approval{approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1, on(""))},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredOtherChange},
		},
		{
			name: "an approve given on the change counts", cr: later(),
			approvals:  []sluicev1.Approval{approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1, on("checkout-prod-fedcba9876"))},
			wantReason: sluicev1.ReasonApprovalsMet,
		},
		{
			name: "a review of a pull request's preview counts for the change that merged the pull request", cr: later(merging(7)),
			approvals:  []sluicev1.Approval{approval("a1", "github:bob", sluicev1.DecisionApprove, 1, review(7))},
			wantReason: sluicev1.ReasonApprovalsMet,
		},
		{
			name: "a kubectl approve of a preview counts for the change that merged its pull request", cr: later(merging(3, 7)),
			approvals:  []sluicev1.Approval{approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1, on(sluicev1.PreviewChangeRequestName("checkout-prod", 7, "0000000000")))},
			wantReason: sluicev1.ReasonApprovalsMet,
		},
		{
			name: "a review of a preview does not count for a change that did not merge its pull request", cr: later(merging(8)),
			approvals:   []sluicev1.Approval{approval("a1", "github:bob", sluicev1.DecisionApprove, 1, review(7))},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredOtherChange},
		},
		{
			name: "a review of a preview does not count for a later change with the same content", cr: later(),
			approvals:   []sluicev1.Approval{approval("a1", "github:bob", sluicev1.DecisionApprove, 1, review(7))},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredOtherChange},
		},
		{
			name: "a review whose pull request is not the preview's does not count", cr: later(merging(7)),
			approvals: []sluicev1.Approval{approval("a1", "github:bob", sluicev1.DecisionApprove, 1, review(7), func(a *sluicev1.Approval) {
				a.Spec.PullRequest = 8
			})},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredOtherChange},
		},
		{
			name: "an approve of a branch change does not count as a preview's", cr: later(merging(7)),
			approvals:   []sluicev1.Approval{approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1, on("checkout-prod-del-0123456789"))},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredOtherChange},
		},
		{
			name: "a preview counts the reviews given on itself", cr: change(preview(7)),
			approvals:  []sluicev1.Approval{approval("a1", "github:bob", sluicev1.DecisionApprove, 1, review(7))},
			wantReason: sluicev1.ReasonApprovalsMet,
		},
		{
			name: "a preview does not count the reviews of another preview with the same content", cr: change(preview(8)),
			approvals:   []sluicev1.Approval{approval("a1", "github:bob", sluicev1.DecisionApprove, 1, review(7))},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredOtherChange},
		},
		{
			name: "a reject given on an earlier change vetoes the content in a later change", cr: later(),
			approvals:  []sluicev1.Approval{approval("a1", "k8s:bob", sluicev1.DecisionReject, 1, on(first))},
			wantReason: sluicev1.ReasonVetoed,
		},
		{
			name: "a reject that names no change vetoes the content", cr: later(),
			approvals:  []sluicev1.Approval{approval("a1", "k8s:bob", sluicev1.DecisionReject, 1, on(""))},
			wantReason: sluicev1.ReasonVetoed,
		},
		{
			name: "an approve of another change with the same content does not take back the approve of this one", cr: later(),
			approvals: []sluicev1.Approval{
				approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1, on("checkout-prod-fedcba9876")),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2, on(first)),
			},
			wantReason:  sluicev1.ReasonApprovalsMet,
			wantIgnored: []IgnoreReason{IgnoredSuperseded},
		},
		{
			name: "a reject later followed by an approve of one change ends the veto, and the approve counts there only", cr: later(),
			approvals: []sluicev1.Approval{
				approval("a1", "k8s:bob", sluicev1.DecisionReject, 1, on(first)),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2, on(first)),
			},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredSuperseded, IgnoredOtherChange},
		},
		{
			name: "an approve of this change from before a reject does not count", cr: later(),
			approvals: []sluicev1.Approval{
				approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1, on("checkout-prod-fedcba9876")),
				approval("a2", "k8s:bob", sluicev1.DecisionReject, 2, on(first)),
			},
			wantReason:  sluicev1.ReasonVetoed,
			wantIgnored: []IgnoreReason{IgnoredSuperseded},
		},
		{
			name: "a revoke given on another change with the same content withdraws the approve of this one", cr: later(),
			approvals: []sluicev1.Approval{
				approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1, on("checkout-prod-fedcba9876")),
				approval("a2", "k8s:bob", sluicev1.DecisionRevoke, 2, on(first)),
			},
			wantReason:  sluicev1.ReasonAwaitingApprovals,
			wantIgnored: []IgnoreReason{IgnoredSuperseded, IgnoredRevoked},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Evaluate(tt.cr, one, tt.approvals)
			if d.Reason != tt.wantReason {
				t.Fatalf("reason %s (%s), want %s", d.Reason, d.Message, tt.wantReason)
			}
			var got []IgnoreReason
			for _, ig := range d.Ignored {
				got = append(got, ig.Why)
			}
			slices.Sort(got)
			want := slices.Clone(tt.wantIgnored)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Fatalf("ignored %+v, want reasons %v", d.Ignored, tt.wantIgnored)
			}
		})
	}
}

// TestGate_awaitingSaysWhyAnApproveOfAnotherChangeDoesNotCount: the
// message tells the approver that content coming back needs a new
// approval.
func TestGate_awaitingSaysWhyAnApproveOfAnotherChangeDoesNotCount(t *testing.T) {
	one := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1}})
	cr := change(func(c *sluicev1.ChangeRequest) { c.Name = "checkout-prod-fedcba9876" })
	d := Evaluate(cr, one, []sluicev1.Approval{approval("a1", "k8s:bob", sluicev1.DecisionApprove, 1)})
	if !strings.Contains(d.Message, "given on another change with the same content do not count") {
		t.Fatalf("message %q does not say why the approve does not count", d.Message)
	}
}
