package gate

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// release builds a Release of the test namespace.
func release(name string, env sluicev1.EnvironmentName, target string, mod ...func(*sluicev1.Release)) sluicev1.Release {
	r := sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       sluicev1.ReleaseSpec{Environment: env, TargetNamespace: target},
	}
	for _, m := range mod {
		m(&r)
	}
	return r
}

// appliedIn marks a Release as applied in its target namespace under rule.
func appliedIn(target string, rule sluicev1.ApprovalRule) func(*sluicev1.Release) {
	return func(r *sluicev1.Release) {
		r.Status.AppliedTargetNamespace = target
		r.Status.AppliedRule = &rule
	}
}

func policyNamed(name string, spec sluicev1.ApprovalPolicySpec) sluicev1.ApprovalPolicy {
	return sluicev1.ApprovalPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: spec}
}

func namespaceObj(name string, lbls map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls}}
}

// prodFloor is the rule platform admins want for production.
var prodFloor = sluicev1.ApprovalRule{Required: 2, Approvers: ids("k8s-group:sre"), AutoApproveRisk: sluicev1.AutoApproveNone}

// lowered is the rule a pusher writes for a new environment: nothing to ask.
var lowered = sluicev1.ApprovalRule{Required: 0, AllowAuthor: true, AutoApproveRisk: sluicev1.AutoApproveHigh}

// changeOf builds a change of release rel to target with its own rule.
func changeOf(rel, target string, rule sluicev1.ApprovalRule) *sluicev1.ChangeRequest {
	return change(func(c *sluicev1.ChangeRequest) {
		c.Name = rel + "-0123456789"
		c.Spec.Release = rel
		c.Spec.TargetNamespace = target
		// The environment the change records, as the syncer names it.
		c.Spec.Source.Environment = sluicev1.EnvironmentName(strings.TrimPrefix(rel, "checkout-"))
		c.Spec.Rule = rule
		c.Spec.Verdict.Risk = sluicev1.RiskLow
	})
}

func TestPolicySelectsByNamespace(t *testing.T) {
	prod := namespaceObj("checkout-prod", map[string]string{"sluice.dev/tier": "production"})
	tests := []struct {
		name    string
		spec    sluicev1.ApprovalPolicySpec
		env     sluicev1.EnvironmentName
		target  string
		nsObj   *corev1.Namespace
		want    bool
		wantErr bool
	}{
		{name: "a glob matching the target namespace selects a release whatever its environment is called",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"*-prod"}}, env: "prod2", target: "checkout-prod", want: true},
		{name: "an exact namespace selects a release deploying there",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"checkout-prod"}}, env: "x", target: "checkout-prod", want: true},
		{name: "a glob that does not match the target namespace does not select",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"*-prod"}}, env: "prod", target: "checkout-staging", want: false},
		{name: "a question mark matches exactly one character",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"prod-?"}}, env: "a", target: "prod-1", want: true},
		{name: "a glob does not match a longer name it is only a prefix of",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"checkout-prod"}}, env: "a", target: "checkout-prod2", want: false},
		{name: "a namespace label selector selects a release whose target Namespace has the labels",
			spec: sluicev1.ApprovalPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/tier": "production"}}}, env: "anything", target: "checkout-prod", nsObj: prod, want: true},
		{name: "a namespace label selector does not select a release whose Namespace lacks the labels",
			spec: sluicev1.ApprovalPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/tier": "production"}}}, env: "prod", target: "checkout-staging", nsObj: namespaceObj("checkout-staging", nil), want: false},
		{name: "a namespace label selector matches nothing when the Namespace does not exist",
			spec: sluicev1.ApprovalPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/tier": "production"}}}, env: "prod", target: "checkout-prod", want: false},
		{name: "a namespace label selector never reads another Namespace's labels",
			spec: sluicev1.ApprovalPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/tier": "production"}}}, env: "prod", target: "checkout-staging", nsObj: prod, want: false},
		{name: "a matchExpressions selector selects by label existence",
			spec: sluicev1.ApprovalPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "sluice.dev/tier", Operator: metav1.LabelSelectorOpExists}}}}, env: "a", target: "checkout-prod", nsObj: prod, want: true},
		{name: "globs and the label selector select together: either one is enough",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"billing-*"}, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/tier": "production"}}}, env: "a", target: "checkout-prod", nsObj: prod, want: true},
		{name: "a policy with only the namespace form never selects by environment name",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"*-prod"}}, env: "prod", target: "checkout-staging", want: false},
		{name: "a policy with both forms selects through the environment when the namespace does not match",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"*-prod"}, Environments: []sluicev1.EnvironmentName{"prod"}}, env: "prod", target: "checkout-live", want: true},
		{name: "a policy with both forms selects through the namespace when the environment does not match",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"*-prod"}, Environments: []sluicev1.EnvironmentName{"prod"}}, env: "prod2", target: "checkout-prod", want: true},
		{name: "a policy with neither form selects every release",
			spec: sluicev1.ApprovalPolicySpec{}, env: "dev", target: "checkout-dev", want: true},
		{name: "an invalid namespace selector selects (fails closed) and says why",
			spec: sluicev1.ApprovalPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "tier", Operator: "Bogus"}}}}, env: "dev", target: "checkout-dev", want: true, wantErr: true},
		{name: "an invalid glob selects (fails closed) and says why",
			spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"[prod"}}, env: "dev", target: "checkout-dev", want: true, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policyNamed("p", tt.spec)
			rel := release("svc-"+string(tt.env), tt.env, tt.target)
			got, err := PolicySelects(&p, &rel, tt.target, tt.nsObj)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Fatalf("PolicySelects = %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

// TestGate_newEnvironmentNameIsNotANewStart is the attack of issue 12: a
// pusher adds `prod2: {namespace: checkout-prod, approval: {required: 0}}`
// next to the protected prod environment. The new Release has no applied
// rule and no policy names its environment, yet it must not pass without
// the approvals checkout-prod's policy asks for.
func TestGate_newEnvironmentNameIsNotANewStart(t *testing.T) {
	prod := release("checkout-prod", "prod", "checkout-prod", appliedIn("checkout-prod", sluicev1.ApprovalRule{Required: 1}))
	prod2 := release("checkout-prod2", "prod2", "checkout-prod")
	in := Inputs{
		Release:  &prod2,
		Releases: []sluicev1.Release{prod, prod2},
		Policies: []sluicev1.ApprovalPolicy{policyNamed("prod-floor", sluicev1.ApprovalPolicySpec{Environments: []sluicev1.EnvironmentName{"prod"}, Rule: prodFloor})},
	}
	cr := changeOf("checkout-prod2", "checkout-prod", lowered)
	d, errs := Decide(in, cr, nil)
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	if d.Passed {
		t.Fatalf("a new environment name reached checkout-prod without approval: %s (rule %s)", d.Message, d.Rule)
	}
	if d.Rule.Required != 2 || d.Rule.AutoApproveRisk != sluicev1.AutoApproveNone || !d.Rule.NewToNamespace {
		t.Fatalf("rule %s (new to namespace %v), want prod-floor's 2 approvals from [k8s-group:sre], new to namespace", d.Rule, d.Rule.NewToNamespace)
	}
	if !slices.ContainsFunc(d.Rule.Origins, func(o string) bool {
		return strings.HasPrefix(o, "ApprovalPolicy/prod-floor (selects Release/checkout-prod")
	}) {
		t.Fatalf("origins %v do not name prod-floor through checkout-prod", d.Rule.Origins)
	}
}

// TestGate_newToNamespaceRules covers the other ways into a protected
// namespace and the ways out of the strict rule.
func TestGate_newToNamespaceRules(t *testing.T) {
	envFloor := policyNamed("prod-floor", sluicev1.ApprovalPolicySpec{Environments: []sluicev1.EnvironmentName{"prod"}, Rule: prodFloor})
	nsFloor := policyNamed("prod-namespaces", sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"*-prod"}, Rule: prodFloor})
	labelFloor := policyNamed("production", sluicev1.ApprovalPolicySpec{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"sluice.dev/tier": "production"}}, Rule: prodFloor})
	three := sluicev1.ApprovalRule{Required: 3, AutoApproveRisk: sluicev1.AutoApproveNone}

	tests := []struct {
		name       string
		rel        sluicev1.Release
		others     []sluicev1.Release
		policies   []sluicev1.ApprovalPolicy
		nsObj      *corev1.Namespace
		target     string
		wantPass   bool
		wantNew    bool
		wantOrigin string
	}{
		{
			name:     "a namespace-glob policy holds a new environment name with no other release in the namespace",
			rel:      release("checkout-prod2", "prod2", "checkout-prod"),
			policies: []sluicev1.ApprovalPolicy{nsFloor}, target: "checkout-prod",
			wantNew: true, wantOrigin: "ApprovalPolicy/prod-namespaces",
		},
		{
			name:     "a namespace-label policy holds a release whose environment and namespace name are unremarkable",
			rel:      release("checkout-live", "live", "checkout-live"),
			policies: []sluicev1.ApprovalPolicy{labelFloor}, target: "checkout-live",
			nsObj:   namespaceObj("checkout-live", map[string]string{"sluice.dev/tier": "production"}),
			wantNew: true, wantOrigin: "ApprovalPolicy/production",
		},
		{
			name:     "a release moved from staging into the prod namespace gets the rules that protect prod",
			rel:      release("checkout-staging", "staging", "checkout-prod", appliedIn("checkout-staging", lowered)),
			others:   []sluicev1.Release{release("checkout-prod", "prod", "checkout-prod", appliedIn("checkout-prod", three))},
			policies: []sluicev1.ApprovalPolicy{envFloor}, target: "checkout-prod",
			wantNew: true, wantOrigin: "Release/checkout-prod status.appliedRule (in namespace checkout-prod; new to namespace)",
		},
		{
			name:     "a prod release moved away in the same push still protects the namespace it applied to",
			rel:      release("checkout-prod2", "prod2", "checkout-prod"),
			others:   []sluicev1.Release{release("checkout-prod", "prod", "checkout-elsewhere", appliedIn("checkout-prod", sluicev1.ApprovalRule{Required: 1}))},
			policies: []sluicev1.ApprovalPolicy{envFloor}, target: "checkout-prod",
			wantNew: true, wantOrigin: "ApprovalPolicy/prod-floor (selects Release/checkout-prod in namespace checkout-prod; new to namespace)",
		},
		{
			name:    "the other release's applied rule counts even when no policy names it",
			rel:     release("checkout-prod2", "prod2", "checkout-prod"),
			others:  []sluicev1.Release{release("checkout-prod", "prod", "checkout-prod", appliedIn("checkout-prod", three))},
			target:  "checkout-prod",
			wantNew: true, wantOrigin: "Release/checkout-prod status.appliedRule (in namespace checkout-prod; new to namespace)",
		},
		{
			name:     "a release already applied in its namespace is judged by its own policies only",
			rel:      release("checkout-canary", "canary", "checkout-prod", appliedIn("checkout-prod", lowered)),
			others:   []sluicev1.Release{release("checkout-prod", "prod", "checkout-prod", appliedIn("checkout-prod", three))},
			policies: []sluicev1.ApprovalPolicy{envFloor}, target: "checkout-prod",
			wantPass: true,
		},
		{
			name:     "a new release in an unprotected namespace passes under its own rule",
			rel:      release("checkout-dev", "dev", "checkout-dev"),
			others:   []sluicev1.Release{release("checkout-prod", "prod", "checkout-prod", appliedIn("checkout-prod", three))},
			policies: []sluicev1.ApprovalPolicy{envFloor, nsFloor}, target: "checkout-dev",
			wantPass: true, wantNew: true,
		},
		{
			name:     "releases of another control namespace do not take part",
			rel:      release("checkout-prod2", "prod2", "checkout-prod"),
			others:   []sluicev1.Release{release("checkout-prod", "prod", "checkout-prod", appliedIn("checkout-prod", three), func(r *sluicev1.Release) { r.Namespace = "other-team" })},
			target:   "checkout-prod",
			wantPass: true, wantNew: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rel := tt.rel
			in := Inputs{Release: &rel, Releases: append([]sluicev1.Release{rel}, tt.others...), Policies: tt.policies, Namespace: tt.nsObj}
			d, errs := Decide(in, changeOf(rel.Name, tt.target, lowered), nil)
			if len(errs) > 0 {
				t.Fatalf("errors: %v", errs)
			}
			if d.Passed != tt.wantPass || d.Rule.NewToNamespace != tt.wantNew {
				t.Fatalf("passed %v, new to namespace %v (%s; rule %s from %v); want passed %v, new %v", d.Passed, d.Rule.NewToNamespace, d.Message, d.Rule, d.Rule.Origins, tt.wantPass, tt.wantNew)
			}
			if tt.wantOrigin != "" && !slices.Contains(d.Rule.Origins, tt.wantOrigin) {
				t.Fatalf("origins %v, want %q among them", d.Rule.Origins, tt.wantOrigin)
			}
		})
	}
}

// person builds a Person.
func person(name string, identities ...string) sluicev1.Person {
	return sluicev1.Person{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: sluicev1.PersonSpec{Identities: ids(identities...)}}
}

// TestGate_authorApprovingUnderAnotherIdentityDoesNotCount is the attack of
// issue 12: dave pushed (author email:dave@example.com) and approves as the
// Kubernetes user or GitHub login that a Person maps to the same man.
func TestGate_authorApprovingUnderAnotherIdentityDoesNotCount(t *testing.T) {
	people := NewPeople([]sluicev1.Person{
		person("dave", "email:Dave@Example.com", "k8s:dave", "github:DaveX"),
		person("erin", "email:erin@example.com", "k8s:erin"),
	})
	rule := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1}})
	for _, approver := range []string{"k8s:dave", "github:davex"} {
		t.Run(approver, func(t *testing.T) {
			cr := change(func(c *sluicev1.ChangeRequest) { c.Spec.Authors = ids("email:dave@example.com") })
			d := EvaluateFor(cr, rule, []sluicev1.Approval{approval("a1", approver, sluicev1.DecisionApprove, 1)}, people)
			if d.Passed {
				t.Fatalf("the author approved his own change as %s: %s", approver, d.Message)
			}
			if len(d.Ignored) != 1 || d.Ignored[0].Why != IgnoredAuthor {
				t.Fatalf("ignored %+v, want the approval ignored as an author's", d.Ignored)
			}
			other := EvaluateFor(cr, rule, []sluicev1.Approval{approval("a2", "k8s:erin", sluicev1.DecisionApprove, 1)}, people)
			if !other.Passed {
				t.Fatalf("another person's approval did not count: %s", other.Message)
			}
		})
	}
}

func TestGate_onePersonCountsOnce(t *testing.T) {
	people := NewPeople([]sluicev1.Person{person("alice", "k8s:alice", "github:alice")})
	rule := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 2}})
	approvals := []sluicev1.Approval{
		approval("a1", "k8s:alice", sluicev1.DecisionApprove, 1),
		approval("a2", "github:alice", sluicev1.DecisionApprove, 2, func(a *sluicev1.Approval) { a.Spec.Source = sluicev1.SourcePullRequest }),
	}
	d := EvaluateFor(change(), rule, approvals, people)
	if d.Passed || len(d.ApprovedBy) != 1 {
		t.Fatalf("one person's two identities counted as %v (passed %v)", d.ApprovedBy, d.Passed)
	}
	if !slices.ContainsFunc(d.Ignored, func(i Ignored) bool { return i.Why == IgnoredSamePerson }) {
		t.Fatalf("ignored %+v, want one SamePerson", d.Ignored)
	}
	// Without the Persons they are two identities, as before.
	if d := Evaluate(change(), rule, approvals); !d.Passed {
		t.Fatalf("two unmapped identities did not count twice: %s", d.Message)
	}
}

func TestNewPeople(t *testing.T) {
	people := NewPeople([]sluicev1.Person{
		person("a", "k8s:a", "email:shared@example.com"),
		person("b", "github:b", "email:Shared@example.com"),
		person("c", "k8s:c"),
	})
	if people.Key("k8s:a") != people.Key("github:B") {
		t.Fatal("two Persons sharing an identity are not one person")
	}
	if people.Key("k8s:c") == people.Key("k8s:a") {
		t.Fatal("separate Persons were joined")
	}
	if got := people.Names("github:b"); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("Names = %v, want [a b]", got)
	}
	if people.Key("k8s:nobody") != "k8s:nobody" || (People{}).Key("github:X") != "github:x" {
		t.Fatal("an unmapped identity is not its own canonical person")
	}
}

// TestGate_pullRequestAuthorsAndPushersAreAuthors: whoever opened or pushed
// to the pull request is an author too, under every identity of theirs.
func TestGate_pullRequestAuthorsAndPushersAreAuthors(t *testing.T) {
	people := NewPeople([]sluicev1.Person{person("mallory", "github:mallory", "k8s:mallory"), person("oscar", "gitea:oscar", "k8s:oscar")})
	rule := Strictest(Source{Rule: sluicev1.ApprovalRule{Required: 1}})
	cr := change(func(c *sluicev1.ChangeRequest) {
		c.Spec.Authors = ids("email:dave@example.com")
		c.Spec.PullRequestAuthor = "github:mallory"
		c.Spec.Pushers = ids("gitea:oscar")
	})
	for _, approver := range []string{"k8s:mallory", "k8s:oscar", "github:mallory"} {
		d := EvaluateFor(cr, rule, []sluicev1.Approval{approval("a1", approver, sluicev1.DecisionApprove, 1)}, people)
		if d.Passed || len(d.Ignored) != 1 || d.Ignored[0].Why != IgnoredAuthor {
			t.Fatalf("%s approved a change they opened or pushed to: %s (ignored %+v)", approver, d.Message, d.Ignored)
		}
	}
}

// deleteOf builds the Delete change of release rel the syncer proposes:
// its spec.targetNamespace is target (what the latest push wrote), its
// deletion records applied (where the workload is).
func deleteOf(rel, target, applied string) *sluicev1.ChangeRequest {
	return change(func(c *sluicev1.ChangeRequest) {
		c.Name = rel + "-delete-0123456789"
		c.Spec.Release = rel
		c.Spec.Operation = sluicev1.OperationDelete
		c.Spec.TargetNamespace = target
		c.Spec.Deletion = &sluicev1.DeletionSpec{TargetNamespace: applied, Delivery: sluicev1.DeliveryHelm, Source: c.Spec.Source.DeepCopy()}
		c.Spec.Rule = lowered
		c.Spec.Verdict.Risk = sluicev1.RiskHigh
	})
}

func TestGate_aDeleteIsJudgedByTheNamespaceItWasAppliedTo(t *testing.T) {
	prodNS := policyNamed("prod-namespace", sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"prod-ns"}, Rule: prodFloor})
	// Applied in prod-ns; a later push (never approved) moved the
	// environment to staging-ns.
	moved := release("checkout-prod", "prod", "staging-ns", appliedIn("prod-ns", sluicev1.ApprovalRule{Required: 1}))
	staging := []sluicev1.Approval{approval("a1", "k8s:sam", sluicev1.DecisionApprove, 1, func(a *sluicev1.Approval) { a.Spec.Groups = []string{"staging"} })}
	for name, cr := range map[string]*sluicev1.ChangeRequest{
		"the deletion records the applied namespace":          deleteOf("checkout-prod", "staging-ns", "prod-ns"),
		"without it, the Release's applied namespace is used": deleteOf("checkout-prod", "staging-ns", ""),
	} {
		t.Run(name, func(t *testing.T) {
			for i := range staging {
				staging[i].Spec.ApprovalDigest = cr.Spec.ApprovalDigest
			}
			in := Inputs{Release: &moved, Policies: []sluicev1.ApprovalPolicy{prodNS}}
			if got := TargetNamespace(&moved, cr); got != "prod-ns" {
				t.Fatalf("TargetNamespace = %q, want prod-ns", got)
			}
			d, _ := Decide(in, cr, staging)
			if d.Passed {
				t.Fatalf("a staging approver's approval deleted prod: %s (rule %s from %v)", d.Message, d.Rule, d.Rule.Origins)
			}
			if !slices.Contains(d.Rule.Origins, "ApprovalPolicy/prod-namespace") || d.Rule.NewToNamespace {
				t.Fatalf("origins %v (new to namespace %v), want prod-namespace's rule for the namespace it was applied to", d.Rule.Origins, d.Rule.NewToNamespace)
			}
		})
	}
}

func TestGate_theEnvironmentComesFromTheChangeNotTheRelease(t *testing.T) {
	envFloor := policyNamed("prod-floor", sluicev1.ApprovalPolicySpec{Environments: []sluicev1.EnvironmentName{"prod"}, Rule: prodFloor})
	// The Release's spec names another environment than the change does
	// (a later push rewrote it): the change's own environment picks.
	rel := release("checkout-prod", "renamed", "checkout-prod", appliedIn("checkout-prod", lowered))
	in := Inputs{Release: &rel, Policies: []sluicev1.ApprovalPolicy{envFloor}}
	cr := changeOf("checkout-prod", "checkout-prod", lowered)
	if d, _ := Decide(in, cr, nil); d.Passed || !slices.Contains(d.Rule.Origins, "ApprovalPolicy/prod-floor") {
		t.Fatalf("the change's environment prod did not pick prod-floor: %s from %v", d.Message, d.Rule.Origins)
	}
	// A change that records no environment is held by every policy that
	// names environments: the floor fails closed.
	bare := changeOf("checkout-prod", "checkout-prod", lowered)
	bare.Spec.Source = nil
	rel.Spec.Environment = "dev"
	if d, _ := Decide(in, bare, nil); d.Passed || !slices.Contains(d.Rule.Origins, "ApprovalPolicy/prod-floor") {
		t.Fatalf("a change without a source escaped prod-floor: %s from %v", d.Message, d.Rule.Origins)
	}
}
