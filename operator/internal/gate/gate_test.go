package gate

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const ns = "team"

var (
	contentA = sluicev1.SHA256Digest([]byte("content a"))
	contentB = sluicev1.SHA256Digest([]byte("content b"))
	manifest = sluicev1.SHA256Digest([]byte("manifest"))
	t0       = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
)

func ids(s ...string) []sluicev1.Identity {
	out := make([]sluicev1.Identity, len(s))
	for i, x := range s {
		out[i] = sluicev1.Identity(x)
	}
	return out
}

func list(s ...string) sluicev1.ApproverList { return sluicev1.ApproverList(ids(s...)) }

// change builds a valid ChangeRequest for release checkout-prod.
func change(mod ...func(*sluicev1.ChangeRequest)) *sluicev1.ChangeRequest {
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "checkout-prod-0123456789", Namespace: ns},
		Spec: sluicev1.ChangeRequestSpec{
			Release:         "checkout-prod",
			TargetNamespace: "checkout-prod",
			Source:          &sluicev1.ChangeSource{Service: "checkout", Environment: "prod", Path: "services/checkout"},
			Revision:        strings.Repeat("0123456789", 4),
			Authors:         ids("github:dave", "email:dave@example.com"),
			ContentDigest:   contentA,
			ManifestDigest:  manifest,
			Verdict:         sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskMedium},
			Rule:            sluicev1.ApprovalRule{Required: 2},
		},
	}
	for _, m := range mod {
		m(cr)
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	return cr
}

// approval builds an Approval for the default change, made at t0+sec.
func approval(name, approver string, d sluicev1.Decision, sec int, mod ...func(*sluicev1.Approval)) sluicev1.Approval {
	a := sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))},
		Spec: sluicev1.ApprovalSpec{
			Release:        "checkout-prod",
			ChangeRequest:  change().Name,
			ApprovalDigest: change().Spec.ApprovalDigest,
			Decision:       d,
			Approver:       sluicev1.Identity(approver),
			Source:         sluicev1.SourceKubernetes,
		},
	}
	for _, m := range mod {
		m(&a)
	}
	return a
}

func TestStrictest(t *testing.T) {
	tests := []struct {
		name    string
		sources []sluicev1.ApprovalRule
		want    Rule
	}{
		{
			name:    "required is the largest of the sources",
			sources: []sluicev1.ApprovalRule{{Required: 1}, {Required: 3}, {Required: 0}},
			want:    Rule{Required: 3, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "auto-approve risk is the lowest, none lowest of all",
			sources: []sluicev1.ApprovalRule{{AutoApproveRisk: sluicev1.AutoApproveHigh}, {AutoApproveRisk: sluicev1.AutoApproveLow}},
			want:    Rule{AutoApproveRisk: sluicev1.AutoApproveLow},
		},
		{
			name:    "an empty auto-approve risk counts as none",
			sources: []sluicev1.ApprovalRule{{AutoApproveRisk: sluicev1.AutoApproveHigh}, {}},
			want:    Rule{AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "authors may approve only when every source allows it",
			sources: []sluicev1.ApprovalRule{{AllowAuthor: true}, {AllowAuthor: false}},
			want:    Rule{AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "authors may approve when all sources allow it",
			sources: []sluicev1.ApprovalRule{{AllowAuthor: true}, {AllowAuthor: true}},
			want:    Rule{AllowAuthor: true, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "an empty approver list adds no constraint",
			sources: []sluicev1.ApprovalRule{{Approvers: ids("github:alice", "k8s:bob")}, {}},
			want:    Rule{ApproverLists: []sluicev1.ApproverList{list("github:alice", "k8s:bob")}, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "a list containing another list adds no constraint",
			sources: []sluicev1.ApprovalRule{{Approvers: ids("k8s:bob", "github:alice", "k8s:carol")}, {Approvers: ids("k8s:bob", "github:alice")}},
			want:    Rule{ApproverLists: []sluicev1.ApproverList{list("github:alice", "k8s:bob")}, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "two lists sharing nobody mean nobody may approve, never anyone",
			sources: []sluicev1.ApprovalRule{{Approvers: ids("github:alice")}, {Approvers: ids("github:bob")}},
			want:    Rule{ApproverLists: []sluicev1.ApproverList{list("github:alice"), list("github:bob")}, NoApprovers: true, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "a group list and a user list stay both, since the user may be in the group",
			sources: []sluicev1.ApprovalRule{{Approvers: ids("k8s-group:sre")}, {Approvers: ids("k8s:bob", "github:alice")}},
			want:    Rule{ApproverLists: []sluicev1.ApproverList{list("k8s-group:sre"), list("github:alice", "k8s:bob")}, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "a group list and a list of non-Kubernetes identities share nobody",
			sources: []sluicev1.ApprovalRule{{Approvers: ids("k8s-group:sre")}, {Approvers: ids("github:alice")}},
			want:    Rule{ApproverLists: []sluicev1.ApproverList{list("github:alice"), list("k8s-group:sre")}, NoApprovers: true, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "noApprovers in any source wins",
			sources: []sluicev1.ApprovalRule{{NoApprovers: true}, {Required: 1}},
			want:    Rule{Required: 1, NoApprovers: true, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "allOf lists of a recorded rule are kept",
			sources: []sluicev1.ApprovalRule{{Approvers: ids("k8s-group:sre"), AllOf: []sluicev1.ApproverList{list("k8s:bob", "github:alice")}}},
			want:    Rule{ApproverLists: []sluicev1.ApproverList{list("k8s-group:sre"), list("github:alice", "k8s:bob")}, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
		{
			name:    "an empty list inside allOf means nobody",
			sources: []sluicev1.ApprovalRule{{AllOf: []sluicev1.ApproverList{{}}}},
			want:    Rule{NoApprovers: true, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var src []Source
			for _, r := range tt.sources {
				src = append(src, Source{Rule: r})
			}
			got := Strictest(src...)
			got.Origins = nil
			if !equalRule(got, tt.want) {
				t.Fatalf("Strictest:\n got %+v\nwant %+v", got, tt.want)
			}
			// The API form round-trips.
			again := Strictest(Source{Rule: got.API()})
			again.Origins = nil
			if !equalRule(again, got) {
				t.Fatalf("round trip through API():\n got %+v\nwant %+v", again, got)
			}
		})
	}
}

func equalRule(a, b Rule) bool {
	if a.Required != b.Required || a.NoApprovers != b.NoApprovers || a.AllowAuthor != b.AllowAuthor || a.AutoApproveRisk != b.AutoApproveRisk {
		return false
	}
	return slices.EqualFunc(a.ApproverLists, b.ApproverLists, func(x, y sluicev1.ApproverList) bool { return slices.Equal(x, y) })
}

func TestStrictestWithNoSourcesIsClosed(t *testing.T) {
	r := Strictest()
	if !r.NoApprovers || r.AutoApproveRisk != sluicev1.AutoApproveNone {
		t.Fatalf("Strictest() = %+v, want nobody may approve and no auto-approval", r)
	}
}

func TestAllows(t *testing.T) {
	rule := Strictest(Source{Rule: sluicev1.ApprovalRule{Approvers: ids("k8s-group:sre", "github:alice", "k8s:bob")}})
	both := Strictest(
		Source{Rule: sluicev1.ApprovalRule{Approvers: ids("k8s-group:sre")}},
		Source{Rule: sluicev1.ApprovalRule{Approvers: ids("k8s:bob", "github:alice")}},
	)
	tests := []struct {
		name     string
		rule     Rule
		approver string
		groups   []string
		source   sluicev1.ApprovalSource
		want     bool
	}{
		{"a listed identity is allowed", rule, "github:alice", nil, sluicev1.SourcePullRequest, true},
		{"a listed Kubernetes user is allowed", rule, "k8s:bob", nil, sluicev1.SourceKubernetes, true},
		{"a Kubernetes user in a listed group is allowed", rule, "k8s:erin", []string{"dev", "sre"}, sluicev1.SourceKubernetes, true},
		{"a Kubernetes user outside the listed groups is not allowed", rule, "k8s:erin", []string{"dev"}, sluicev1.SourceKubernetes, false},
		{"groups count only for source kubernetes", rule, "github:erin", []string{"sre"}, sluicev1.SourcePullRequest, false},
		{"groups never make a non-Kubernetes identity match", rule, "github:erin", []string{"sre"}, sluicev1.SourceKubernetes, false},
		{"an identity outside the list is not allowed", rule, "github:mallory", nil, sluicev1.SourcePullRequest, false},
		{"a group identity itself never approves", rule, "k8s-group:sre", nil, sluicev1.SourceKubernetes, false},
		{"with two lists, a user named in one and in a group of the other is allowed", both, "k8s:bob", []string{"sre"}, sluicev1.SourceKubernetes, true},
		{"with two lists, a user named in one but outside the other's group is not", both, "k8s:bob", []string{"dev"}, sluicev1.SourceKubernetes, false},
		{"with two lists, a group member named in neither is not allowed", both, "k8s:erin", []string{"sre"}, sluicev1.SourceKubernetes, false},
		{"with no lists anyone is allowed", Strictest(Source{}), "github:anyone", nil, sluicev1.SourcePullRequest, true},
		{"with noApprovers nobody is allowed", Strictest(Source{Rule: sluicev1.ApprovalRule{NoApprovers: true}}), "k8s:bob", nil, sluicev1.SourceKubernetes, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.rule.Allows(sluicev1.Identity(tt.approver), tt.groups, tt.source); got != tt.want {
				t.Fatalf("Allows(%s, %v, %s) = %v, want %v", tt.approver, tt.groups, tt.source, got, tt.want)
			}
		})
	}
}

func TestPolicySelects(t *testing.T) {
	rel := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "checkout-prod", Namespace: ns, Labels: map[string]string{"tier": "critical"}},
		Spec:       sluicev1.ReleaseSpec{Environment: "prod"},
	}
	policy := func(envs []sluicev1.EnvironmentName, sel *metav1.LabelSelector) *sluicev1.ApprovalPolicy {
		return &sluicev1.ApprovalPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}, Spec: sluicev1.ApprovalPolicySpec{Environments: envs, ReleaseSelector: sel}}
	}
	tests := []struct {
		name    string
		p       *sluicev1.ApprovalPolicy
		want    bool
		wantErr bool
	}{
		{"a policy with no environments and no selector selects every release", policy(nil, nil), true, false},
		{"a policy listing the environment selects it", policy([]sluicev1.EnvironmentName{"staging", "prod"}, nil), true, false},
		{"a policy listing other environments does not", policy([]sluicev1.EnvironmentName{"staging"}, nil), false, false},
		{"a matching label selector selects", policy(nil, &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "critical"}}), true, false},
		{"a label selector that does not match does not", policy(nil, &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "web"}}), false, false},
		{"environment and selector must both match", policy([]sluicev1.EnvironmentName{"staging"}, &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "critical"}}), false, false},
		{"an invalid selector selects (fails closed) and says why", policy(nil, &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Bogus"}}}), true, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := PolicySelects(tt.p, rel, "checkout-prod", nil)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("PolicySelects = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	other := policy(nil, nil)
	other.Namespace = "elsewhere"
	if ok, _ := PolicySelects(other, rel, "checkout-prod", nil); ok {
		t.Fatal("a policy in another namespace selected the release")
	}
}

func TestEffectiveRuleIsStrictestOfPolicyAppliedAndOwnRule(t *testing.T) {
	rel := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "checkout-prod", Namespace: ns},
		Spec:       sluicev1.ReleaseSpec{Environment: "prod"},
		Status:     sluicev1.ReleaseStatus{AppliedTargetNamespace: "checkout-prod", AppliedRule: &sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre")}},
	}
	policies := []sluicev1.ApprovalPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "prod-floor", Namespace: ns}, Spec: sluicev1.ApprovalPolicySpec{Environments: []sluicev1.EnvironmentName{"prod"}, Rule: sluicev1.ApprovalRule{Required: 3, AutoApproveRisk: sluicev1.AutoApproveLow}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "staging-floor", Namespace: ns}, Spec: sluicev1.ApprovalPolicySpec{Environments: []sluicev1.EnvironmentName{"staging"}, Rule: sluicev1.ApprovalRule{Required: 5}}},
	}
	// The push lowers its own rule to nothing.
	cr := change(func(c *sluicev1.ChangeRequest) {
		c.Spec.Rule = sluicev1.ApprovalRule{Required: 0, AllowAuthor: true, AutoApproveRisk: sluicev1.AutoApproveHigh}
	})
	r, errs := EffectiveRule(Inputs{Release: rel, Policies: policies}, cr)
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if r.Required != 3 || r.AllowAuthor || r.AutoApproveRisk != sluicev1.AutoApproveNone || len(r.ApproverLists) != 1 {
		t.Fatalf("effective rule %s (%+v), want 3 approvals from [k8s-group:sre], authors excluded, auto-approve none", r, r)
	}
	want := []string{"ApprovalPolicy/prod-floor", "Release/checkout-prod status.appliedRule", "ChangeRequest/" + cr.Name + " spec.rule"}
	if !slices.Equal(r.Origins, want) {
		t.Fatalf("origins %v, want %v", r.Origins, want)
	}
}

func TestEvaluate(t *testing.T) {
	two := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre", "github:alice", "k8s:bob", "k8s:carol", "github:dave")}})
	anyone2 := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 2}})
	autoLow := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 2, AutoApproveRisk: sluicev1.AutoApproveLow}})
	sre := func(a *sluicev1.Approval) { a.Spec.Groups = []string{"sre"} }
	low := func(c *sluicev1.ChangeRequest) { c.Spec.Verdict.Risk = sluicev1.RiskLow }

	tests := []struct {
		name         string
		cr           *sluicev1.ChangeRequest
		rule         Rule
		approvals    []sluicev1.Approval
		wantPassed   bool
		wantReason   string
		wantApproved []string
		wantRejected []string
		wantNeeded   int32
		wantIgnored  []IgnoreReason
	}{
		{
			name: "with no approval the change waits", cr: change(), rule: two,
			wantReason: sluicev1.ReasonAwaitingApprovals, wantNeeded: 2,
		},
		{
			name: "with one of two approvals the change waits", cr: change(), rule: two,
			approvals:  []sluicev1.Approval{approval("a1", "github:alice", sluicev1.DecisionApprove, 1)},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
		},
		{
			name: "two distinct allowed approvers pass the gate", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2),
			},
			wantPassed: true, wantReason: sluicev1.ReasonApprovalsMet, wantApproved: []string{"github:alice", "k8s:bob"},
		},
		{
			name: "provider logins compare case-insensitively, so GitHub's Alice is the allowed alice", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:Alice", sluicev1.DecisionApprove, 1),
				approval("a2", "github:ALICE", sluicev1.DecisionApprove, 2),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredSuperseded},
		},
		{
			name: "an author is recognised whatever the case of the login", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:Dave", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"k8s:bob"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredAuthor},
		},
		{
			name: "Kubernetes user names stay case-sensitive", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "k8s:Bob", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"k8s:bob"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredNotAllowed},
		},
		{
			name: "the same approver approving twice counts once", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "github:alice", sluicev1.DecisionApprove, 2),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredSuperseded},
		},
		{
			name: "a member of an allowed group counts", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:erin", sluicev1.DecisionApprove, 2, sre),
			},
			wantPassed: true, wantReason: sluicev1.ReasonApprovalsMet, wantApproved: []string{"github:alice", "k8s:erin"},
		},
		{
			name: "an approval for another digest does not count", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2, func(a *sluicev1.Approval) {
					a.Spec.ApprovalDigest = change(func(c *sluicev1.ChangeRequest) { c.Spec.ContentDigest = contentB }).Spec.ApprovalDigest
				}),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredOtherDigest},
		},
		{
			name: "an approval for another release with the same content does not count", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2, func(a *sluicev1.Approval) {
					a.Spec.Release = "checkout-staging"
					a.Spec.ApprovalDigest = sluicev1.ComputeApprovalDigest(ns, "checkout-staging", contentA, manifest, "")
				}),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredOtherRelease},
		},
		{
			name: "an approval naming another release with this change's digest does not count", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2, func(a *sluicev1.Approval) { a.Spec.Release = "checkout-staging" }),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredOtherRelease},
		},
		{
			name: "an approval by an author does not count", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "github:dave", sluicev1.DecisionApprove, 2, func(a *sluicev1.Approval) { a.Spec.Source = sluicev1.SourcePullRequest }),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredAuthor},
		},
		{
			name: "an approval by an author counts when every rule allows authors", cr: change(),
			rule: Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 2, AllowAuthor: true}}),
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "github:dave", sluicev1.DecisionApprove, 2),
			},
			wantPassed: true, wantReason: sluicev1.ReasonApprovalsMet, wantApproved: []string{"github:alice", "github:dave"},
		},
		{
			name: "an approval by someone outside the allowlist does not count", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:mallory", sluicev1.DecisionApprove, 2, func(a *sluicev1.Approval) { a.Spec.Groups = []string{"dev"} }),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredNotAllowed},
		},
		{
			name: "a standing reject vetoes the change even with enough approvals", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2),
				approval("a3", "k8s:carol", sluicev1.DecisionReject, 3),
			},
			wantReason: sluicev1.ReasonVetoed, wantApproved: []string{"github:alice", "k8s:bob"}, wantRejected: []string{"k8s:carol"},
		},
		{
			name: "a reject by someone outside the allowlist is no veto", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2),
				approval("a3", "k8s:mallory", sluicev1.DecisionReject, 3),
			},
			wantPassed: true, wantReason: sluicev1.ReasonApprovalsMet, wantApproved: []string{"github:alice", "k8s:bob"},
			wantIgnored: []IgnoreReason{IgnoredNotAllowed},
		},
		{
			name: "an author may veto their own change", cr: change(), rule: anyone2,
			approvals:  []sluicev1.Approval{approval("a1", "github:dave", sluicev1.DecisionReject, 1)},
			wantReason: sluicev1.ReasonVetoed, wantRejected: []string{"github:dave"},
		},
		{
			name: "a reject later revoked no longer vetoes", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionReject, 2),
				approval("a3", "k8s:bob", sluicev1.DecisionRevoke, 3),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredSuperseded, IgnoredRevoked},
		},
		{
			name: "a revoke after an approve withdraws it", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2),
				approval("a3", "k8s:bob", sluicev1.DecisionRevoke, 3),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredSuperseded, IgnoredRevoked},
		},
		{
			name: "an approve after a reject by the same approver stands", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 5),
				approval("a1", "k8s:bob", sluicev1.DecisionReject, 1),
				approval("a3", "github:alice", sluicev1.DecisionApprove, 2),
			},
			wantPassed: true, wantReason: sluicev1.ReasonApprovalsMet, wantApproved: []string{"github:alice", "k8s:bob"},
			wantIgnored: []IgnoreReason{IgnoredSuperseded},
		},
		{
			name: "decisions made in the same second are ordered by resourceVersion", cr: change(), rule: two,
			approvals: []sluicev1.Approval{
				approval("z-revoke", "k8s:bob", sluicev1.DecisionRevoke, 1, func(a *sluicev1.Approval) { a.ResourceVersion = "100" }),
				approval("a-approve", "k8s:bob", sluicev1.DecisionApprove, 1, func(a *sluicev1.Approval) { a.ResourceVersion = "99" }),
				approval("a3", "github:alice", sluicev1.DecisionApprove, 2),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantApproved: []string{"github:alice"}, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredSuperseded, IgnoredRevoked},
		},
		{
			name: "a low-risk change auto-approves under autoApproveRisk low", cr: change(low), rule: autoLow,
			wantPassed: true, wantReason: sluicev1.ReasonAutoApproved,
		},
		{
			name: "a medium-risk change does not auto-approve under autoApproveRisk low", cr: change(), rule: autoLow,
			wantReason: sluicev1.ReasonAwaitingApprovals, wantNeeded: 2,
		},
		{
			name: "an unverifiable finding blocks auto-approval",
			cr: change(low, func(c *sluicev1.ChangeRequest) {
				c.Spec.Verdict.Findings = []sluicev1.Finding{{Severity: sluicev1.SeverityUnverifiable, Message: "image tag known only at apply"}}
			}),
			rule:       autoLow,
			wantReason: sluicev1.ReasonAwaitingApprovals, wantNeeded: 2,
		},
		{
			name: "an unverifiable finding does not block approval by people", cr: change(low, func(c *sluicev1.ChangeRequest) {
				c.Spec.Verdict.Findings = []sluicev1.Finding{{Severity: sluicev1.SeverityUnverifiable, Message: "x"}}
			}),
			rule: autoLow,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2),
			},
			wantPassed: true, wantReason: sluicev1.ReasonApprovalsMet, wantApproved: []string{"github:alice", "k8s:bob"},
		},
		{
			name: "a deny finding rejects the change whatever the approvals",
			cr: change(func(c *sluicev1.ChangeRequest) {
				c.Spec.Verdict = sluicev1.Verdict{Result: sluicev1.VerdictFail, Risk: sluicev1.RiskLow, Findings: []sluicev1.Finding{{Severity: sluicev1.SeverityDeny, Message: "public bucket"}}}
			}),
			rule: autoLow,
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "k8s:bob", sluicev1.DecisionApprove, 2),
			},
			wantReason: sluicev1.ReasonPolicyDenied,
		},
		{
			name: "a rule requiring no approval passes without any",
			cr:   change(), rule: Strictest(Source{Rule: sluicev1.ApprovalRule{}}),
			wantPassed: true, wantReason: sluicev1.ReasonApprovalsMet,
		},
		{
			name: "when nobody may approve only auto-approval can pass", cr: change(),
			rule: Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1, Approvers: ids("github:alice")}}, Source{Rule: sluicev1.ApprovalRule{Approvers: ids("github:bob")}}),
			approvals: []sluicev1.Approval{
				approval("a1", "github:alice", sluicev1.DecisionApprove, 1),
				approval("a2", "github:bob", sluicev1.DecisionApprove, 2),
			},
			wantReason: sluicev1.ReasonAwaitingApprovals, wantNeeded: 1,
			wantIgnored: []IgnoreReason{IgnoredNotAllowed, IgnoredNotAllowed},
		},
		{
			name: "a spec.approvalDigest that does not match the content rejects the change",
			cr: func() *sluicev1.ChangeRequest {
				c := change()
				c.Spec.ApprovalDigest = sluicev1.ComputeApprovalDigest(ns, "checkout-staging", contentA, manifest, "")
				return c
			}(),
			rule:       anyone2,
			wantReason: sluicev1.ReasonDigestMismatch,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Evaluate(tt.cr, tt.rule, tt.approvals)
			if d.Passed != tt.wantPassed || d.Reason != tt.wantReason {
				t.Fatalf("Evaluate = passed %v reason %s (%s), want passed %v reason %s", d.Passed, d.Reason, d.Message, tt.wantPassed, tt.wantReason)
			}
			if !slices.Equal(d.ApprovedBy, ids(tt.wantApproved...)) {
				t.Errorf("approvedBy %v, want %v", d.ApprovedBy, tt.wantApproved)
			}
			if !slices.Equal(d.RejectedBy, ids(tt.wantRejected...)) {
				t.Errorf("rejectedBy %v, want %v", d.RejectedBy, tt.wantRejected)
			}
			if d.Reason == sluicev1.ReasonAwaitingApprovals && d.Needed.Approvals != tt.wantNeeded {
				t.Errorf("needed %d more, want %d", d.Needed.Approvals, tt.wantNeeded)
			}
			var whys []IgnoreReason
			for _, ig := range d.Ignored {
				whys = append(whys, ig.Why)
			}
			if !slices.Equal(whys, tt.wantIgnored) {
				t.Errorf("ignored %+v, want reasons %v", d.Ignored, tt.wantIgnored)
			}
			if d.Message == "" {
				t.Error("empty message")
			}
		})
	}
}

func TestDecisionPhase(t *testing.T) {
	tests := []struct {
		reason string
		passed bool
		want   sluicev1.ChangeRequestPhase
	}{
		{sluicev1.ReasonPolicyDenied, false, sluicev1.PhaseRejected},
		{sluicev1.ReasonVetoed, false, sluicev1.PhaseRejected},
		{sluicev1.ReasonDigestMismatch, false, sluicev1.PhaseRejected},
		{sluicev1.ReasonAwaitingApprovals, false, sluicev1.PhaseAwaitingApproval},
		{sluicev1.ReasonApprovalsMet, true, sluicev1.PhaseApproved},
		{sluicev1.ReasonAutoApproved, true, sluicev1.PhaseApproved},
	}
	for _, tt := range tests {
		if got := (Decision{Reason: tt.reason, Passed: tt.passed}).Phase(); got != tt.want {
			t.Errorf("%s: phase %s, want %s", tt.reason, got, tt.want)
		}
	}
}

func TestStillNeededNamesWhoCanApprove(t *testing.T) {
	rule := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre", "github:alice", "github:dave")}})
	d := Evaluate(change(), rule, []sluicev1.Approval{approval("a1", "github:alice", sluicev1.DecisionApprove, 1)})
	// alice approved, dave is an author: only the sre group is left.
	if !slices.Equal(d.Needed.Candidates, ids("k8s-group:sre")) || d.Needed.Approvals != 1 {
		t.Fatalf("needed %+v, want 1 more from [k8s-group:sre]", d.Needed)
	}
	if !strings.Contains(d.Message, "1 more from k8s-group:sre") {
		t.Fatalf("message %q does not say who is needed", d.Message)
	}
	anyone := Evaluate(change(), Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1}}), nil)
	if !anyone.Needed.Anyone || anyone.Needed.Nobody {
		t.Fatalf("needed %+v, want anyone", anyone.Needed)
	}
	nobody := Evaluate(change(), Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1, NoApprovers: true}}), nil)
	if !nobody.Needed.Nobody || nobody.Needed.Anyone || !strings.Contains(nobody.Message, "nobody") {
		t.Fatalf("needed %+v (%s), want nobody", nobody.Needed, nobody.Message)
	}
}

func TestRuleString(t *testing.T) {
	r := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre"), AutoApproveRisk: sluicev1.AutoApproveLow}})
	if got, want := r.String(), "2 approvals from [k8s-group:sre], authors excluded, auto-approve low"; got != want {
		t.Fatalf("String() = %q, want %q", got, want)
	}
}

// BenchmarkEvaluate is one gate decision for a change with a policy, an
// applied rule and twenty Approvals (hack/bench.sh prints it).
func BenchmarkEvaluate(b *testing.B) {
	rel := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "checkout-prod", Namespace: ns},
		Spec:       sluicev1.ReleaseSpec{Environment: "prod"},
		Status:     sluicev1.ReleaseStatus{AppliedTargetNamespace: "checkout-prod", AppliedRule: &sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre", "k8s:bob")}},
	}
	policies := []sluicev1.ApprovalPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "floor", Namespace: ns}, Spec: sluicev1.ApprovalPolicySpec{Rule: sluicev1.ApprovalRule{Required: 2}}}}
	cr := change()
	var approvals []sluicev1.Approval
	for i := range 20 {
		approvals = append(approvals, approval(fmt.Sprintf("a%d", i), fmt.Sprintf("k8s:user%d", i%7), sluicev1.DecisionApprove, i, func(a *sluicev1.Approval) { a.Spec.Groups = []string{"sre"} }))
	}
	b.ReportAllocs()
	for b.Loop() {
		if d, _ := Decide(Inputs{Release: rel, Policies: policies}, cr, approvals); !d.Passed {
			b.Fatal(d.Message)
		}
	}
}
