package plugin_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/config"
	"github.com/sluice-gitops/sluice/operator/internal/admission"
	"github.com/sluice-gitops/sluice/operator/internal/admission/admissiontest"
	"github.com/sluice-gitops/sluice/operator/internal/plugin"
)

const (
	sluiceNS = "sluice-system"
	teamNS   = "team-a"
)

var (
	env    *testenv.Env
	params = admission.Params{
		Namespace: sluiceNS,
		Syncer:    types.NamespacedName{Namespace: sluiceNS, Name: "sluice-gitops-syncer"},
		Operator:  types.NamespacedName{Namespace: sluiceNS, Name: "sluice-operator"},
	}
	// carol is an RBAC-limited approver in the group sre; the plugin runs as
	// her. The syncer (impersonated) creates Releases and ChangeRequests,
	// since the admission policies are installed and allow nobody else.
	carolCfg *rest.Config
	syncer   client.Client
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, setup) }

// setup readies the control plane for the tests: the namespaces, the user roles,
// the admission policies in force, carol and the syncer.
func setup(e *testenv.Env) error {
	env = e
	var err error
	ctx := context.Background()
	if err := env.CreateNamespaces(ctx, sluiceNS, teamNS, "team-b"); err != nil {
		return err
	}
	if err := grant(ctx); err != nil {
		return err
	}
	if err := admissiontest.Enforce(ctx, env, params); err != nil {
		return err
	}
	if carolCfg, err = env.AddUser("carol", "sre"); err != nil {
		return err
	}
	syncer, err = env.ClientAs(admission.ServiceAccountUsername(params.Syncer), admission.ServiceAccountGroups(params.Syncer)...)
	return err
}

// grant installs the shipped user roles and binds sluice-approver to the
// group sre (carol's); the syncer gets its writes.
func grant(ctx context.Context) error {
	objs, err := decodeAll(config.UserRoles)
	if err != nil {
		return fmt.Errorf("config/rbac/users.yaml: %w", err)
	}
	objs = append(objs,
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "sluice-approver-sre"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sluice-approver"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "sre"}},
		},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "sluice-syncer"},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}},
				{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create", "get"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "sluice-syncer"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sluice-syncer"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: params.Syncer.Namespace, Name: params.Syncer.Name}},
		},
	)
	for _, o := range objs {
		if err := env.Client.Create(ctx, o); err != nil {
			return err
		}
	}
	for _, spec := range []authorizationv1.SubjectAccessReviewSpec{
		{User: "carol", Groups: []string{"sre"}, ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "create", Group: sluicev1.GroupVersion.Group, Resource: "approvals"}},
		{User: admission.ServiceAccountUsername(params.Syncer), ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "create", Group: sluicev1.GroupVersion.Group, Resource: "changerequests"}},
		{User: admission.ServiceAccountUsername(params.Syncer), ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "create", Resource: "configmaps"}},
	} {
		if err := env.WaitAllowed(ctx, spec); err != nil {
			return err
		}
	}
	return nil
}

// decodeAll decodes a multi-document YAML file of core kinds strictly.
func decodeAll(data []byte) ([]client.Object, error) {
	decoder := serializer.NewCodecFactory(env.Scheme, serializer.EnableStrict).UniversalDeserializer()
	var out []client.Object
	for _, doc := range strings.Split(string(data), "\n---\n") {
		obj, _, err := decoder.Decode([]byte(doc), nil, nil)
		if runtime.IsMissingKind(err) {
			continue // the comment header
		}
		if err != nil {
			return nil, err
		}
		out = append(out, obj.(client.Object))
	}
	return out, nil
}

// sluice runs the plugin in-process as carol.
func sluice(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return sluiceAs(t, carolCfg, args...)
}

func sluiceAs(t *testing.T, cfg *rest.Config, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := plugin.Run(context.Background(), args, &out, &errOut, cfg)
	return out.String(), errOut.String(), err
}

var seq atomic.Int32

// newChange creates (as the syncer) a Release in environment env and one
// ChangeRequest for it with the given rule, and returns the change.
func newChange(t *testing.T, ns, environment string, rule sluicev1.ApprovalRule, authors ...sluicev1.Identity) *sluicev1.ChangeRequest {
	t.Helper()
	return newChangeInShard(t, ns, environment, rule, "", authors...)
}

// newChangeInShard is newChange in shard key (its Release and change carry
// the key, as the syncer writes them for a Repository of that shard).
func newChangeInShard(t *testing.T, ns, environment string, rule sluicev1.ApprovalRule, key string, authors ...sluicev1.Identity) *sluicev1.ChangeRequest {
	t.Helper()
	ctx := context.Background()
	n := seq.Add(1)
	service := fmt.Sprintf("svc%d", n)
	rel := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ReleaseName(service, sluicev1.EnvironmentName(environment)), Namespace: ns},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: service, Environment: sluicev1.EnvironmentName(environment),
			SourcePath: sluicev1.RelativePath("services/" + service), TargetNamespace: service + "-" + environment,
			Chart: sluicev1.ChartSource{Path: "charts/service"}, Rule: rule,
		},
	}
	if key != "" {
		rel.Spec.Repository = "infra-" + key
		sluicev1.SetShard(rel, key)
	}
	require.NoError(t, syncer.Create(ctx, rel))
	content := sluicev1.SHA256Digest([]byte(fmt.Sprintf("content-%d", n)))
	manifest := sluicev1.SHA256Digest([]byte(fmt.Sprintf("manifest-%d", n)))
	revision := fmt.Sprintf("%040x", n)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name: sluicev1.ChangeRequestName(rel.Name, revision, 1), Namespace: ns,
			Labels: map[string]string{sluicev1.LabelRelease: rel.Name},
		},
		Spec: sluicev1.ChangeRequestSpec{
			Release: rel.Name, Revision: revision, Authors: authors, CommitMessage: "Raise replicas\n\nbody",
			TargetNamespace: rel.Spec.TargetNamespace,
			Artifact:        sluicev1.ArtifactReference{URL: "http://artifacts.invalid/" + rel.Name + ".tar.gz", SHA256: sluicev1.SHA256Digest([]byte("tgz"))},
			ContentDigest:   content, ManifestDigest: manifest,
			Verdict: sluicev1.Verdict{Result: sluicev1.VerdictWarn, Risk: sluicev1.RiskMedium, Findings: []sluicev1.Finding{
				{Severity: sluicev1.SeverityWarn, Source: "helm", Policy: "sluice.helm.resources", Resource: "Deployment/web", Message: "no memory limit", File: "services/x/values.yaml", Line: 3},
			}},
			Rule:           rule,
			ApprovalDigest: sluicev1.ComputeApprovalDigest(ns, rel.Name, content, manifest, ""),
		},
	}
	sluicev1.SetShard(cr, key)
	require.NoError(t, syncer.Create(ctx, cr))
	return cr
}

// setStatus writes the change's status as the operator would (through the
// status subresource, as the admin).
func setStatus(t *testing.T, cr *sluicev1.ChangeRequest, mutate func(*sluicev1.ChangeRequestStatus)) {
	t.Helper()
	ctx := context.Background()
	var live sluicev1.ChangeRequest
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cr), &live))
	mutate(&live.Status)
	require.NoError(t, env.Client.Status().Update(ctx, &live))
}

func approvalsOf(t *testing.T, cr *sluicev1.ChangeRequest) []sluicev1.Approval {
	t.Helper()
	var list sluicev1.ApprovalList
	require.NoError(t, env.Client.List(context.Background(), &list, client.InNamespace(cr.Namespace), client.MatchingLabels{sluicev1.LabelRelease: cr.Spec.Release}))
	return list.Items
}

func whoAmI(t *testing.T, cfg *rest.Config) authenticationv1.UserInfo {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	return r.Status.UserInfo
}

func TestApprove_createsApprovalInTheUsersName(t *testing.T) {
	cr := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})

	out, _, err := sluice(t, "approve", cr.Name, "-n", teamNS, "--comment", "looks right")
	require.NoError(t, err)
	require.Contains(t, out, "created: k8s:carol approved change "+cr.Name)

	got := approvalsOf(t, cr)
	require.Len(t, got, 1)
	a := got[0]
	me := whoAmI(t, carolCfg)
	require.Equal(t, sluicev1.Identity("k8s:carol"), a.Spec.Approver)
	require.ElementsMatch(t, me.Groups, a.Spec.Groups)
	require.Contains(t, a.Spec.Groups, "sre")
	require.Equal(t, sluicev1.DecisionApprove, a.Spec.Decision)
	require.Equal(t, sluicev1.SourceKubernetes, a.Spec.Source)
	require.Equal(t, cr.Spec.ApprovalDigest, a.Spec.ApprovalDigest)
	require.Equal(t, cr.Spec.Release, a.Spec.Release)
	require.Equal(t, cr.Name, a.Spec.ChangeRequest, "the approve is bound to the change it was given on")
	require.Equal(t, "looks right", a.Spec.Comment)
	require.True(t, strings.HasPrefix(a.Name, cr.Name+"-approve-"), a.Name)

	// A second approval gets its own name.
	_, _, err = sluice(t, "approve", cr.Name, "-n", teamNS)
	require.NoError(t, err)
	require.Len(t, approvalsOf(t, cr), 2)
}

func TestGet_showsTheShardAndApproveKeepsTheApprovalInIt(t *testing.T) {
	cr := newChangeInShard(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1}, "eu")
	sel := sluicev1.LabelRelease + "=" + cr.Spec.Release
	out, _, err := sluice(t, "get", "-n", teamNS, "-l", sel)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^NAME\s+RELEASE\s+OPERATION\s+PHASE\s+RISK\s+APPROVALS\s+SHARD\s+AGE$`, lines[0])
	require.Regexp(t, `^`+cr.Name+`\s+.*\s+eu\s+\d+s$`, lines[1])

	// The Approval goes to the change's shard (admission refuses any
	// other key, so the approve would fail without it).
	_, _, err = sluice(t, "approve", cr.Name, "-n", teamNS)
	require.NoError(t, err)
	got := approvalsOf(t, cr)
	require.Len(t, got, 1)
	require.Equal(t, "eu", sluicev1.ShardOf(&got[0]))
}

func TestApprove_saysWhenTheApprovalDoesNotCount(t *testing.T) {
	cr := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1, Approvers: []sluicev1.Identity{"github:erin"}})
	_, errOut, err := sluice(t, "approve", cr.Name, "-n", teamNS)
	require.NoError(t, err, "the Approval is recorded all the same")
	require.Contains(t, errOut, "note: your approve does not count: the effective rule (1 approval from [github:erin], authors excluded, auto-approve none) does not allow k8s:carol")
	require.Len(t, approvalsOf(t, cr), 1)

	author := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1}, "k8s:carol")
	_, errOut, err = sluice(t, "approve", author.Name, "-n", teamNS)
	require.NoError(t, err)
	require.Contains(t, errOut, "note: your approve does not count: you are an author of change "+author.Name)

	counted := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})
	_, errOut, err = sluice(t, "approve", counted.Name, "-n", teamNS)
	require.NoError(t, err)
	require.Empty(t, errOut)
}

func TestRejectAndRevoke_recordTheDecision(t *testing.T) {
	cr := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})

	out, _, err := sluice(t, "reject", cr.Name, "-n", teamNS, "--comment", "breaks checkout", "-o", "json")
	require.NoError(t, err)
	var rejected sluicev1.Approval
	require.NoError(t, json.Unmarshal([]byte(out), &rejected))
	require.Equal(t, sluicev1.DecisionReject, rejected.Spec.Decision)
	require.Equal(t, "breaks checkout", rejected.Spec.Comment)

	out, _, err = sluice(t, "revoke", cr.Name, "-n", teamNS, "-o", "name")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "approval.gitops.sluice.dev/"+cr.Name+"-revoke-"), out)

	decisions := map[sluicev1.Decision]int{}
	for _, a := range approvalsOf(t, cr) {
		decisions[a.Spec.Decision]++
	}
	require.Equal(t, map[sluicev1.Decision]int{sluicev1.DecisionReject: 1, sluicev1.DecisionRevoke: 1}, decisions)
}

func TestApprove_dryRunCreatesNothing(t *testing.T) {
	cr := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})

	out, _, err := sluice(t, "approve", cr.Name, "-n", teamNS, "--dry-run")
	require.NoError(t, err)
	var printed sluicev1.Approval
	require.NoError(t, yaml.UnmarshalStrict([]byte(out), &printed), out)
	require.Equal(t, "Approval", printed.Kind)
	require.Equal(t, sluicev1.Identity("k8s:carol"), printed.Spec.Approver)
	require.Equal(t, cr.Spec.ApprovalDigest, printed.Spec.ApprovalDigest)

	// The server dry run goes through admission, and stores nothing either.
	out, _, err = sluice(t, "approve", cr.Name, "-n", teamNS, "--dry-run=server", "-o", "json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &printed))
	require.NotEmpty(t, printed.Name, "the server generated a name")

	require.Empty(t, approvalsOf(t, cr), "a dry run creates no Approval")
}

func TestDescribe_showsWhoIsStillNeeded(t *testing.T) {
	ctx := context.Background()
	// A platform floor for the "desc" environment, and a stricter rule in
	// the change itself: two approvals from the sre group or erin, no
	// authors.
	floor := &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "desc-floor", Namespace: "team-b"},
		Spec:       sluicev1.ApprovalPolicySpec{Environments: []sluicev1.EnvironmentName{"desc"}, Rule: sluicev1.ApprovalRule{Required: 1}},
	}
	require.NoError(t, env.Client.Create(ctx, floor))
	rule := sluicev1.ApprovalRule{Required: 2, Approvers: []sluicev1.Identity{"k8s-group:sre", "github:erin"}}
	cr := newChange(t, "team-b", "desc", rule, "email:dev@example.com")

	out, _, err := sluice(t, "describe", cr.Name, "-n", "team-b")
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "Effective rule:")
	require.Contains(t, out, "2 approvals from [github:erin k8s-group:sre], authors excluded, auto-approve none")
	require.Contains(t, out, "ApprovalPolicy/desc-floor")
	require.Contains(t, out, "Still needed:")
	require.Contains(t, out, "2 more approvals from any of github:erin, k8s-group:sre; authors do not count (email:dev@example.com)")
	require.Contains(t, out, string(cr.Spec.ApprovalDigest))
	require.Contains(t, out, "no memory limit")
	require.Contains(t, out, "services/x/values.yaml:3")

	_, _, err = sluice(t, "approve", cr.Name, "-n", "team-b")
	require.NoError(t, err)

	out, _, err = sluice(t, "describe", cr.Name, "-n", "team-b")
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "1 more approval from any of github:erin, k8s-group:sre; authors do not count (email:dev@example.com); already approved by k8s:carol")
	require.Regexp(t, `k8s:carol\s+approve\s+kubernetes\s+counts`, out)
	require.Contains(t, out, "AwaitingApprovals: 1 of 2 approvals")

	out, _, err = sluice(t, "describe", cr.Name, "-n", "team-b", "-o", "json")
	require.NoError(t, err)
	var d plugin.Description
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.EqualValues(t, 1, d.Gate.MoreApprovals)
	require.Equal(t, []sluicev1.Identity{"github:erin", "k8s-group:sre"}, d.Gate.Candidates)
	require.Equal(t, []sluicev1.Identity{"k8s:carol"}, d.Gate.ApprovedBy)
	require.Len(t, d.Approvals, 1)
	require.Equal(t, "counts", d.Approvals[0].Effect)
	require.Equal(t, "ChangeRequest", d.ChangeRequest.Kind)
}

func TestDescribe_showsThePoliciesOfTheTargetNamespaceAndNewToNamespace(t *testing.T) {
	ctx := context.Background()
	floor := &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "ns-floor", Namespace: "team-b"},
		Spec:       sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"*-nsdesc"}, Rule: sluicev1.ApprovalRule{Required: 3}},
	}
	require.NoError(t, env.Client.Create(ctx, floor))
	cr := newChange(t, "team-b", "nsdesc", sluicev1.ApprovalRule{Required: 0, AutoApproveRisk: sluicev1.AutoApproveHigh})

	out, _, err := sluice(t, "describe", cr.Name, "-n", "team-b")
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Contains(t, out, "3 approvals from anyone allowed")
	require.Regexp(t, `from:\s+ApprovalPolicy/ns-floor`, out)
	require.Regexp(t, `note:\s+new to namespace: Release `+cr.Spec.Release+` has not applied to `+cr.Spec.TargetNamespace, out)
	// carol may not read Namespaces (only RBAC on Sluice's kinds): she is
	// told that label-selected policies may be missing.
	require.Contains(t, out, "you may not read Namespace "+cr.Spec.TargetNamespace)

	out, _, err = sluice(t, "describe", cr.Name, "-n", "team-b", "-o", "json")
	require.NoError(t, err)
	var d plugin.Description
	require.NoError(t, json.Unmarshal([]byte(out), &d))
	require.True(t, d.NewToNamespace)
	require.Contains(t, d.RuleSources, "ApprovalPolicy/ns-floor")
}

func TestDescribe_aPreviewStillShowsWhoIsNeededForItsMergeCommit(t *testing.T) {
	ctx := context.Background()
	rule := sluicev1.ApprovalRule{Required: 1, Approvers: []sluicev1.Identity{"github:erin"}}
	base := newChange(t, teamNS, "prod", rule)
	preview := base.DeepCopy()
	preview.ObjectMeta = metav1.ObjectMeta{
		Name: sluicev1.PreviewChangeRequestName(base.Spec.Release, 7, base.Spec.Revision), Namespace: teamNS,
		Labels: map[string]string{sluicev1.LabelRelease: base.Spec.Release, sluicev1.LabelPreview: "true"},
	}
	preview.Spec.PullRequest = &sluicev1.PullRequestRef{Number: 7, HeadSHA: base.Spec.Revision, Preview: true}
	require.NoError(t, syncer.Create(ctx, preview))
	setStatus(t, preview, func(s *sluicev1.ChangeRequestStatus) { s.Phase = sluicev1.PhasePreview })

	out, _, err := sluice(t, "describe", preview.Name, "-n", teamNS)
	require.NoError(t, err)
	require.Contains(t, out, "Pull request:       #7 (head "+base.Spec.Revision[:10]+"), preview: never applied")
	require.Contains(t, out, "Still needed:       for the merge commit with this content: 1 more approval from any of github:erin")

	// Deciding on a preview is allowed: the decision carries over.
	_, _, err = sluice(t, "reject", preview.Name, "-n", teamNS)
	require.NoError(t, err)
}

func TestWait_returnsWhenTheChangeIsApplied(t *testing.T) {
	cr := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})

	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		var out, errOut bytes.Buffer
		err := plugin.Run(context.Background(), []string{"wait", cr.Name, "-n", teamNS, "--for", "applied", "--timeout", "2m"}, &out, &errOut, carolCfg)
		done <- result{out.String(), err}
	}()

	// The operator is not running here: the test moves the change along.
	time.Sleep(500 * time.Millisecond)
	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) { s.Phase = sluicev1.PhaseApplying })
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("wait returned before the change was applied: %q, %v", r.out, r.err)
	default:
	}
	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) { s.Phase = sluicev1.PhaseApplied })

	r := <-done
	require.NoError(t, r.err)
	require.Contains(t, r.out, "changerequest.gitops.sluice.dev/"+cr.Name+" condition met: applied (phase Applied)")

	// Already applied: returns at once; approved is met too.
	out, _, err := sluice(t, "wait", cr.Name, "-n", teamNS, "--for", "approved")
	require.NoError(t, err)
	require.Contains(t, out, "condition met: approved")
}

func TestWait_failsWhenTheChangeCanNeverBeApplied(t *testing.T) {
	cr := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})
	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) {
		s.Phase = sluicev1.PhaseRejected
		apimeta.SetStatusCondition(&s.Conditions, metav1.Condition{Type: sluicev1.ConditionReady, Status: metav1.ConditionFalse, Reason: sluicev1.ReasonVetoed, Message: "rejected by k8s:bob"})
	})
	_, _, err := sluice(t, "wait", cr.Name, "-n", teamNS, "--for", "applied")
	require.ErrorContains(t, err, "change "+cr.Name+" ended Rejected: rejected by k8s:bob; it will never be applied")

	waiting := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})
	_, _, err = sluice(t, "wait", waiting.Name, "-n", teamNS, "--for", "approved", "--timeout", "1s")
	require.ErrorContains(t, err, "timed out after 1s waiting for change "+waiting.Name+" to be approved (last phase ")
}

func TestGet_listsChangesWithReleasePhaseRiskApprovalsAndAge(t *testing.T) {
	cr := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 2})
	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) {
		s.Phase = sluicev1.PhaseAwaitingApproval
		s.Approvals = 1
		s.EffectiveRule = &sluicev1.ApprovalRule{Required: 2}
	})
	sel := sluicev1.LabelRelease + "=" + cr.Spec.Release

	out, _, err := sluice(t, "get", "-n", teamNS, "-l", sel)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^NAME\s+RELEASE\s+OPERATION\s+PHASE\s+RISK\s+APPROVALS\s+AGE$`, lines[0])
	require.Regexp(t, `^`+cr.Name+`\s+`+cr.Spec.Release+`\s+Apply\s+AwaitingApproval\s+medium\s+1/2\s+\d+s$`, lines[1])

	out, _, err = sluice(t, "get", "-A", "-l", sel, "-o", "wide")
	require.NoError(t, err)
	require.Regexp(t, `NAMESPACE\s+NAME\s+RELEASE\s+OPERATION\s+PHASE\s+RISK\s+APPROVALS\s+SHARD\s+AGE\s+VERDICT\s+REVISION`, out)
	require.Regexp(t, teamNS+`\s+`+cr.Name+`\s+`, out)

	out, _, err = sluice(t, "get", "-n", teamNS, "-l", sel, "-o", "json")
	require.NoError(t, err)
	var list sluicev1.ChangeRequestList
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Equal(t, "ChangeRequestList", list.Kind)
	require.Len(t, list.Items, 1)
	require.Equal(t, "ChangeRequest", list.Items[0].Kind)
	require.Empty(t, list.Items[0].ManagedFields)

	out, _, err = sluice(t, "get", cr.Name, "-n", teamNS, "-o", "yaml")
	require.NoError(t, err)
	var one sluicev1.ChangeRequest
	require.NoError(t, yaml.Unmarshal([]byte(out), &one))
	require.Equal(t, cr.Spec.ApprovalDigest, one.Spec.ApprovalDigest)

	out, _, err = sluice(t, "get", "-n", teamNS, "-l", sel, "-o", "name")
	require.NoError(t, err)
	require.Equal(t, "changerequest.gitops.sluice.dev/"+cr.Name+"\n", out)

	_, errOut, err := sluice(t, "get", "-n", teamNS, "-l", "gitops.sluice.dev/release=none-such")
	require.NoError(t, err)
	require.Equal(t, "No changes found in team-a namespace.\n", errOut)
}

func TestBadInput_givesClearErrors(t *testing.T) {
	applied := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})
	setStatus(t, applied, func(s *sluicev1.ChangeRequestStatus) { s.Phase = sluicev1.PhaseApplied })

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"an unknown change", []string{"describe", "nope", "-n", teamNS}, `change "nope" not found in namespace "team-a"`},
		{"approving an unknown change", []string{"approve", "nope", "-n", teamNS}, `change "nope" not found in namespace "team-a"`},
		{"waiting for an unknown change", []string{"wait", "nope", "-n", teamNS, "--for", "applied"}, `change "nope" not found`},
		{"an unknown output format", []string{"get", "-n", teamNS, "-o", "xml"}, `unknown output format "xml": -o takes one of wide, json, yaml, name`},
		{"a table format for describe", []string{"describe", applied.Name, "-o", "wide"}, `unknown output format "wide"`},
		{"no change named", []string{"approve"}, "kubectl sluice approve needs exactly one CHANGE"},
		{"two changes named", []string{"describe", "a", "b"}, "needs exactly one CHANGE (a ChangeRequest name), got 2"},
		{"an unknown condition", []string{"wait", applied.Name, "--for", "done"}, `--for must be "applied" or "approved", not "done"`},
		{"a bad dry-run mode", []string{"approve", applied.Name, "--dry-run=maybe"}, `invalid --dry-run "maybe"`},
		{"a bad selector", []string{"get", "-l", "a in (", "-n", teamNS}, `invalid --selector "a in ("`},
		{"an unknown command", []string{"frobnicate"}, `unknown command "frobnicate"`},
		{"a decision on an applied change", []string{"approve", applied.Name, "-n", teamNS}, "change " + applied.Name + " is Applied: a decision can no longer change it"},
		{"an over-long comment", []string{"approve", applied.Name, "--comment", strings.Repeat("x", 1025)}, "--comment is 1025 characters long; at most 1024"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := sluice(t, tc.args...)
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	require.Empty(t, approvalsOf(t, applied))
}

// kubeconfig writes a kubeconfig for cfg whose context uses namespace ns.
func kubeconfig(t *testing.T, cfg *rest.Config, ns string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, testenv.WriteKubeconfig(cfg, path, ns))
	return path
}

func TestKubectlFlags_kubeconfigContextNamespaceAndAs(t *testing.T) {
	cr := newChange(t, teamNS, "prod", sluicev1.ApprovalRule{Required: 1})

	// The namespace comes from the kubeconfig's context, as with kubectl.
	path := kubeconfig(t, carolCfg, teamNS)
	out, _, err := sluiceAs(t, nil, "--kubeconfig", path, "--context", testenv.KubeconfigContext, "get", cr.Name)
	require.NoError(t, err)
	require.Contains(t, out, cr.Name)

	// An admin acting --as carol approves in carol's name and groups, which
	// is what admission checks.
	admin := kubeconfig(t, env.Config, "default")
	_, _, err = sluiceAs(t, nil, "--kubeconfig", admin, "-n", teamNS, "--as", "carol", "--as-group", "sre", "approve", cr.Name)
	require.NoError(t, err)
	got := approvalsOf(t, cr)
	require.Len(t, got, 1)
	require.Equal(t, sluicev1.Identity("k8s:carol"), got[0].Spec.Approver)
	require.ElementsMatch(t, []string{"sre", "system:authenticated"}, got[0].Spec.Groups)
}

func TestDescribe_aDeleteSaysWhereItActsAndWhatReallyHappened(t *testing.T) {
	ctx := context.Background()
	base := newChange(t, "team-b", "deldesc", sluicev1.ApprovalRule{Required: 1})
	// Applied in the prod namespace; a later push moved the Release's
	// spec elsewhere.
	rel := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: "team-b", Name: base.Spec.Release}, rel))
	rel.Status.AppliedTargetNamespace = "prod-deldesc"
	require.NoError(t, env.Client.Status().Update(ctx, rel))
	del := base.DeepCopy()
	del.ObjectMeta = metav1.ObjectMeta{Name: sluicev1.DeleteChangeRequestName(base.Spec.Release, base.Spec.Revision, 1), Namespace: "team-b",
		Labels: map[string]string{sluicev1.LabelRelease: base.Spec.Release}}
	del.Spec.Operation = sluicev1.OperationDelete
	del.Spec.Deletion = &sluicev1.DeletionSpec{AppliedChange: base.Name, AppliedRevision: base.Spec.Revision, TargetNamespace: "prod-deldesc", Delivery: sluicev1.DeliveryHelm}
	del.Spec.ApprovalDigest = del.ExpectedApprovalDigest()
	require.NoError(t, syncer.Create(ctx, del))
	now := metav1.Now()
	setStatus(t, del, func(s *sluicev1.ChangeRequestStatus) {
		s.Phase = sluicev1.PhaseFailed
		s.Deletion = &sluicev1.DeletionStatus{}
		s.Apply = &sluicev1.ApplyResult{Applier: "helm", Message: "failed: remove the workload from namespace prod-deldesc: the Helm release was left in place", StartedAt: &now, FinishedAt: &now}
	})

	out, _, err := sluice(t, "describe", del.Name, "-n", "team-b")
	require.NoError(t, err)
	t.Log("\n" + out)
	require.Regexp(t, `Target namespace:\s+prod-deldesc \(where it was applied\)`, out, "not the namespace the push wrote")
	require.Regexp(t, `Deletion:\s+the removal failed`, out)
	require.Regexp(t, `what happened:\s+failed: remove the workload from namespace prod-deldesc`, out)
	require.NotContains(t, out, "workload removed")

	setStatus(t, del, func(s *sluicev1.ChangeRequestStatus) {
		s.Phase = sluicev1.PhaseApplied
		s.Deletion = &sluicev1.DeletionStatus{WorkloadRemovedAt: &now, InfrastructureDestroyedAt: &now, ReleaseDeletedAt: &now}
		s.Apply.Message = "Helm release " + base.Spec.Release + " uninstalled from namespace prod-deldesc; no Terraform stack to destroy"
	})
	out, _, err = sluice(t, "describe", del.Name, "-n", "team-b")
	require.NoError(t, err)
	require.Regexp(t, `what happened:\s+Helm release `+base.Spec.Release+` uninstalled from namespace prod-deldesc`, out)
}
