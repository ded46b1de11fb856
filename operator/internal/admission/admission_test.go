package admission_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/config"
	"github.com/sluice-gitops/sluice/operator/internal/admission"
	"github.com/sluice-gitops/sluice/operator/internal/admission/admissiontest"
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
		// bob (group sre) may delete a Release by hand; alice may not.
		BreakGlassGroups: []string{"oncall", "sre"},
	}
	// Clients of the actors. Every one has full RBAC on the Sluice kinds and
	// on Secrets, so any denial comes from admission.
	alice, bob, syncer, operator client.Client
	aliceCfg                     *rest.Config
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, setup) }

// setup readies the control plane for the tests: the namespaces, RBAC for
// every actor, the admission policies in force, and the actors' clients.
func setup(e *testenv.Env) error {
	env = e
	var err error
	ctx := context.Background()
	if err := env.CreateNamespaces(ctx, sluiceNS, teamNS); err != nil {
		return err
	}
	if err := grantEverything(ctx); err != nil {
		return err
	}
	if err := admissiontest.Enforce(ctx, env, params); err != nil {
		return err
	}

	if aliceCfg, err = env.AddUser("alice", "team-payments"); err != nil {
		return err
	}
	bobCfg, err := env.AddUser("bob", "sre")
	if err != nil {
		return err
	}
	if alice, err = client.New(aliceCfg, client.Options{Scheme: env.Scheme}); err != nil {
		return err
	}
	if bob, err = client.New(bobCfg, client.Options{Scheme: env.Scheme}); err != nil {
		return err
	}
	if syncer, err = impersonate(params.Syncer); err != nil {
		return err
	}
	if operator, err = impersonate(params.Operator); err != nil {
		return err
	}
	return nil
}

// impersonate returns a client that acts as the ServiceAccount, with the
// groups the API server gives its tokens.
func impersonate(sa types.NamespacedName) (client.Client, error) {
	return env.ClientAs(admission.ServiceAccountUsername(sa), admission.ServiceAccountGroups(sa)...)
}

// grantEverything gives the test users and ServiceAccounts every verb on the
// Sluice kinds (status included), on Secrets and on ConfigMaps.
func grantEverything(ctx context.Context) error {
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-admission-test-everything"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"*"}, Verbs: []string{"*"}},
			{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"*"}},
		},
	}
	if err := env.Client.Create(ctx, role); err != nil {
		return err
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-admission-test-everything"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"},
			{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "bob"},
			{Kind: rbacv1.ServiceAccountKind, Namespace: params.Syncer.Namespace, Name: params.Syncer.Name},
			{Kind: rbacv1.ServiceAccountKind, Namespace: params.Operator.Namespace, Name: params.Operator.Name},
		},
	}
	if err := env.Client.Create(ctx, binding); err != nil {
		return err
	}
	for _, s := range binding.Subjects {
		user := s.Name
		if s.Kind == rbacv1.ServiceAccountKind {
			user = "system:serviceaccount:" + s.Namespace + ":" + s.Name
		}
		if err := env.WaitAllowed(ctx, authorizationv1.SubjectAccessReviewSpec{User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "create", Group: sluicev1.GroupVersion.Group, Resource: "changerequests"}}); err != nil {
			return err
		}
	}
	return nil
}

// whoAmI asks the API server who cfg's user is.
func whoAmI(t *testing.T, cfg *rest.Config) authenticationv1.UserInfo {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	r, err := cs.AuthenticationV1().SelfSubjectReviews().Create(context.Background(), &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	require.NoError(t, err)
	return r.Status.UserInfo
}

var counter int

func uniqueName(prefix string) string {
	counter++
	return fmt.Sprintf("%s-%d", prefix, counter)
}

func digest(s string) sluicev1.Digest { return sluicev1.SHA256Digest([]byte(s)) }

func approval(approver sluicev1.Identity, groups []string, source sluicev1.ApprovalSource) *sluicev1.Approval {
	a := &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("appr"), Namespace: teamNS},
		Spec: sluicev1.ApprovalSpec{
			Release:        "checkout-prod",
			ChangeRequest:  "checkout-prod-0123456789",
			ApprovalDigest: digest("change-1"),
			Decision:       sluicev1.DecisionApprove,
			Approver:       approver,
			Groups:         groups,
			Source:         source,
		},
	}
	if source == sluicev1.SourcePullRequest {
		a.Spec.PullRequest = 7
		a.Spec.ReviewID = 1001
	}
	return a
}

func changeRequest() *sluicev1.ChangeRequest {
	d := digest("content")
	return &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("checkout-prod-0123456789"), Namespace: teamNS},
		Spec: sluicev1.ChangeRequestSpec{
			Release:         "checkout-prod",
			Revision:        strings.Repeat("a", 40),
			TargetNamespace: "checkout-prod",
			Artifact:        sluicev1.ArtifactReference{URL: "http://artifacts.invalid/x.tar.gz", SHA256: d},
			ContentDigest:   d,
			Verdict:         sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			ApprovalDigest:  sluicev1.ComputeApprovalDigest(teamNS, "checkout-prod", d, "", ""),
		},
	}
}

func release() *sluicev1.Release {
	return &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("checkout-prod"), Namespace: teamNS},
		Spec: sluicev1.ReleaseSpec{
			Repository:      "infra",
			Service:         "checkout",
			Environment:     "prod",
			SourcePath:      "services/checkout",
			TargetNamespace: "checkout-prod",
			Chart:           sluicev1.ChartSource{Path: "charts/service"},
			Rule:            sluicev1.ApprovalRule{Required: 2},
		},
	}
}

func planSecret(cr string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: sluicev1.PlanSecretName(cr, 0), Namespace: teamNS,
			Labels: map[string]string{sluicev1.LabelChangeRequest: cr},
		},
		Data: map[string][]byte{sluicev1.PlanSecretKey: []byte("plan file bytes")},
	}
}

// requireDenied checks that err is an admission denial (403 Forbidden, not an
// RBAC one) whose message contains every fragment.
func requireDenied(t *testing.T, err error, fragments ...string) {
	t.Helper()
	require.Error(t, err, "the request must be denied")
	t.Logf("denied: %v", err)
	require.Truef(t, apierrors.IsForbidden(err) || apierrors.IsInvalid(err), "want Forbidden or Invalid, got %v", err)
	require.NotContains(t, err.Error(), "cannot create resource", "RBAC, not admission, denied it")
	for _, f := range fragments {
		require.Contains(t, err.Error(), f)
	}
}

func TestApproval_inOwnNameWithOwnGroupsIsAllowed(t *testing.T) {
	me := whoAmI(t, aliceCfg)
	require.Equal(t, "alice", me.Username)
	require.Contains(t, me.Groups, "team-payments")

	a := approval("k8s:alice", me.Groups, sluicev1.SourceKubernetes)
	require.NoError(t, alice.Create(context.Background(), a))
}

func TestApproval_ownGroupsInAnotherOrderAreAllowed(t *testing.T) {
	me := whoAmI(t, aliceCfg)
	groups := append([]string(nil), me.Groups...)
	for i, j := 0, len(groups)-1; i < j; i, j = i+1, j-1 {
		groups[i], groups[j] = groups[j], groups[i]
	}
	require.NoError(t, alice.Create(context.Background(), approval("k8s:alice", groups, sluicev1.SourceKubernetes)))
}

func TestApproval_inAnotherUsersNameIsDenied(t *testing.T) {
	me := whoAmI(t, aliceCfg)
	err := alice.Create(context.Background(), approval("k8s:bob", me.Groups, sluicev1.SourceKubernetes))
	requireDenied(t, err, "sluice-approvals", `approver must be "k8s:alice", not "k8s:bob"`)
}

func TestApproval_withForgedGroupsIsDenied(t *testing.T) {
	me := whoAmI(t, aliceCfg)
	forged := append(append([]string(nil), me.Groups...), "sre")
	err := alice.Create(context.Background(), approval("k8s:alice", forged, sluicev1.SourceKubernetes))
	requireDenied(t, err, "must carry your own groups", "not [")

	// Leaving out a group is a forgery too: k8s-group: rules would see less.
	err = alice.Create(context.Background(), approval("k8s:alice", []string{"team-payments"}, sluicev1.SourceKubernetes))
	requireDenied(t, err, "must carry your own groups")
}

// TestApproval_withoutTheChangeDecidedOnIsDenied: an approve counts only
// for the change it was given on, so an Approval in a user's own name
// must say which change that is.
func TestApproval_withoutTheChangeDecidedOnIsDenied(t *testing.T) {
	me := whoAmI(t, aliceCfg)
	a := approval("k8s:alice", me.Groups, sluicev1.SourceKubernetes)
	a.Spec.ChangeRequest = ""
	requireDenied(t, alice.Create(context.Background(), a), "sluice-approvals", "must name the change decided on (spec.changeRequest)")

	// A change of another release is refused by the CRD.
	a = approval("k8s:alice", me.Groups, sluicev1.SourceKubernetes)
	a.Spec.ChangeRequest = "cart-prod-0123456789"
	requireDenied(t, alice.Create(context.Background(), a), "changeRequest must name a change of the Approval's release")
}

func TestApproval_fromPullRequestOnlyBySyncer(t *testing.T) {
	ctx := context.Background()
	err := alice.Create(ctx, approval("github:alice", nil, sluicev1.SourcePullRequest))
	requireDenied(t, err, "only the gitops-syncer's ServiceAccount may create an Approval from source pull-request")

	err = operator.Create(ctx, approval("github:alice", nil, sluicev1.SourcePullRequest))
	requireDenied(t, err, "only the gitops-syncer's ServiceAccount")

	require.NoError(t, syncer.Create(ctx, approval("github:alice", nil, sluicev1.SourcePullRequest)))
}

func TestApproval_editIsDenied(t *testing.T) {
	ctx := context.Background()
	me := whoAmI(t, aliceCfg)
	a := approval("k8s:alice", me.Groups, sluicev1.SourceKubernetes)
	require.NoError(t, alice.Create(ctx, a))

	a.Spec.Decision = sluicev1.DecisionReject
	err := alice.Update(ctx, a)
	requireDenied(t, err, "immutable")

	// Even the syncer cannot rewrite a decision.
	var live sluicev1.Approval
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(a), &live))
	live.Spec.Comment = "rewritten"
	requireDenied(t, syncer.Update(ctx, &live), "immutable")
}

func TestApproval_deleteIsDeniedExceptForTheOperator(t *testing.T) {
	ctx := context.Background()
	me := whoAmI(t, aliceCfg)
	a := approval("k8s:alice", me.Groups, sluicev1.SourceKubernetes)
	require.NoError(t, alice.Create(ctx, a))

	for name, c := range map[string]client.Client{"its approver": alice, "another user": bob, "the syncer": syncer, "an admin": env.Client} {
		t.Run(name, func(t *testing.T) {
			requireDenied(t, c.Delete(ctx, a), "an Approval cannot be deleted", "decision revoke")
		})
	}
	// kubectl delete approvals --all is a DELETE of each one to admission.
	requireDenied(t, alice.DeleteAllOf(ctx, &sluicev1.Approval{}, client.InNamespace(teamNS)), "an Approval cannot be deleted")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(a), &sluicev1.Approval{}), "the Approval is still there")

	// The operator garbage-collects Approvals no ChangeRequest refers to.
	require.NoError(t, operator.Delete(ctx, a))
}

func TestApproval_operatorMayManageFinalizers(t *testing.T) {
	ctx := context.Background()
	me := whoAmI(t, aliceCfg)
	a := approval("k8s:alice", me.Groups, sluicev1.SourceKubernetes)
	require.NoError(t, alice.Create(ctx, a))

	var live sluicev1.Approval
	require.NoError(t, operator.Get(ctx, client.ObjectKeyFromObject(a), &live))
	live.Finalizers = append(live.Finalizers, sluicev1.ApprovalFinalizer)
	require.NoError(t, operator.Update(ctx, &live))
	live.Finalizers = nil
	require.NoError(t, operator.Update(ctx, &live))
}

func TestChangeRequest_userCreateIsDenied(t *testing.T) {
	err := alice.Create(context.Background(), changeRequest())
	requireDenied(t, err, "sluice-syncer-owned", "only the gitops-syncer's ServiceAccount may create a ChangeRequest; alice may not")

	err = operator.Create(context.Background(), changeRequest())
	requireDenied(t, err, "may create a ChangeRequest; system:serviceaccount:sluice-system:sluice-operator may not")

	err = alice.Create(context.Background(), release())
	requireDenied(t, err, "only the gitops-syncer's ServiceAccount may create a Release")
}

func TestChangeRequest_syncerMayCreate(t *testing.T) {
	ctx := context.Background()
	require.NoError(t, syncer.Create(ctx, release()))
	cr := changeRequest()
	require.NoError(t, syncer.Create(ctx, cr))
	require.NoError(t, syncer.Create(ctx, planSecret(cr.Name)))
}

func TestChangeRequest_operatorWritesStatusAndFinalizersButNotSpec(t *testing.T) {
	ctx := context.Background()
	cr := changeRequest()
	require.NoError(t, syncer.Create(ctx, cr))

	var live sluicev1.ChangeRequest
	require.NoError(t, operator.Get(ctx, client.ObjectKeyFromObject(cr), &live))
	live.Status.Phase = sluicev1.PhaseAwaitingApproval
	require.NoError(t, operator.Status().Update(ctx, &live), "the operator writes status")

	live.Finalizers = []string{"gitops.sluice.dev/test"}
	live.Labels = map[string]string{sluicev1.LabelRelease: "checkout-prod"}
	require.NoError(t, operator.Update(ctx, &live), "the operator manages finalizers and labels")

	live.Spec.Verdict.Risk = sluicev1.RiskHigh
	err := operator.Update(ctx, &live)
	requireDenied(t, err, "spec")

	// Release specs are mutable in the CRD; admission alone keeps the
	// operator (and users) out of them.
	rel := release()
	require.NoError(t, syncer.Create(ctx, rel))
	var liveRel sluicev1.Release
	require.NoError(t, operator.Get(ctx, client.ObjectKeyFromObject(rel), &liveRel))
	liveRel.Finalizers = []string{sluicev1.ReleaseFinalizer}
	require.NoError(t, operator.Update(ctx, &liveRel))
	liveRel.Status.CurrentChange = cr.Name
	require.NoError(t, operator.Status().Update(ctx, &liveRel))

	liveRel.Spec.Rule.Required = 0
	err = operator.Update(ctx, &liveRel)
	requireDenied(t, err, "sluice-syncer-owned", "only the gitops-syncer's ServiceAccount may change the spec of a Release")
	err = alice.Update(ctx, &liveRel)
	requireDenied(t, err, "may change the spec of a Release; alice may change its metadata")

	// The syncer updates the spec from the manifest.
	require.NoError(t, syncer.Get(ctx, client.ObjectKeyFromObject(rel), &liveRel))
	liveRel.Spec.Rule.Required = 3
	require.NoError(t, syncer.Update(ctx, &liveRel))

	// A status write cannot smuggle a spec change in: the status endpoint
	// ignores everything but status.
	require.NoError(t, operator.Get(ctx, client.ObjectKeyFromObject(rel), &liveRel))
	liveRel.Spec.Rule.Required = 0
	liveRel.Status.AppliedRevision = strings.Repeat("b", 40)
	require.NoError(t, operator.Status().Update(ctx, &liveRel))
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(rel), &liveRel))
	require.EqualValues(t, 3, liveRel.Spec.Rule.Required)
	require.Equal(t, strings.Repeat("b", 40), liveRel.Status.AppliedRevision)
}

func TestPlanSecret_onlySyncerWritesData(t *testing.T) {
	ctx := context.Background()
	cr := uniqueName("checkout-prod-0123456789")

	err := alice.Create(ctx, planSecret(cr))
	requireDenied(t, err, "sluice-plan-secrets", "only the gitops-syncer's ServiceAccount may create a plan Secret")
	err = operator.Create(ctx, planSecret(cr))
	requireDenied(t, err, "may create a plan Secret")

	s := planSecret(cr)
	require.NoError(t, syncer.Create(ctx, s))

	var live corev1.Secret
	require.NoError(t, operator.Get(ctx, client.ObjectKeyFromObject(s), &live))
	live.Data[sluicev1.PlanSecretKey] = []byte("another plan")
	requireDenied(t, operator.Update(ctx, &live), "may change a plan Secret's data")

	require.NoError(t, operator.Get(ctx, client.ObjectKeyFromObject(s), &live))
	delete(live.Labels, sluicev1.LabelChangeRequest)
	requireDenied(t, alice.Update(ctx, &live), "gitops.sluice.dev/change-request label")

	require.NoError(t, operator.Get(ctx, client.ObjectKeyFromObject(s), &live))
	live.Labels["example.com/seen"] = "true"
	live.Finalizers = []string{"gitops.sluice.dev/test"}
	require.NoError(t, operator.Update(ctx, &live), "other metadata stays writable")

	// Secrets that are not plan Secrets are not Sluice's business.
	other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: uniqueName("other"), Namespace: teamNS}, StringData: map[string]string{"k": "v"}}
	require.NoError(t, alice.Create(ctx, other))
}

func TestApprovalPolicy_syncerNeverWritesOne(t *testing.T) {
	ctx := context.Background()
	p := &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("prod-floor"), Namespace: teamNS},
		Spec:       sluicev1.ApprovalPolicySpec{Environments: []sluicev1.EnvironmentName{"prod"}, Rule: sluicev1.ApprovalRule{Required: 2}},
	}
	requireDenied(t, syncer.Create(ctx, p), "never writes ApprovalPolicies")
	require.NoError(t, env.Client.Create(ctx, p), "platform admins write them")
}

func TestParse_rejectsUnknownFieldsAndKinds(t *testing.T) {
	_, err := admission.Parse([]byte("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicy\nmetadata: {name: x}\nspec: {bogus: 1}\n"))
	require.ErrorContains(t, err, "bogus")
	_, err = admission.Parse([]byte("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n"))
	require.Error(t, err)
	_, err = admission.Parse([]byte("# only a comment\n"))
	require.ErrorContains(t, err, "no ValidatingAdmissionPolicy")
}

func TestLoad_pointsBindingsAtTheParamNamespace(t *testing.T) {
	p, err := admission.Load("elsewhere")
	require.NoError(t, err)
	require.Len(t, p.Policies, 9)
	require.Len(t, p.Bindings, 9)
	for _, b := range p.Bindings {
		if strings.HasPrefix(b.Name, "sluice-shard-") {
			// The shard-key policies read the Repositories or Releases of
			// the request's own namespace.
			require.Empty(t, b.Spec.ParamRef.Namespace, b.Name)
			require.NotNil(t, b.Spec.ParamRef.Selector, b.Name)
			continue
		}
		require.Equal(t, "elsewhere", b.Spec.ParamRef.Namespace)
		require.Equal(t, admission.ParamName, b.Spec.ParamRef.Name)
	}
	for _, pol := range p.Policies {
		for _, v := range pol.Spec.Validations {
			require.NotContains(t, v.Expression, "sluice-gitops-syncer", "no literal ServiceAccount names in the CEL")
			require.NotContains(t, v.Expression, "sluice-operator", "no literal ServiceAccount names in the CEL")
		}
	}
}

func TestApproval_deleteIsAllowedWhileTheNamespaceTerminates(t *testing.T) {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-leaving"}}
	require.NoError(t, env.Client.Create(ctx, ns))
	me := whoAmI(t, aliceCfg)
	a := approval("k8s:alice", me.Groups, sluicev1.SourceKubernetes)
	a.Namespace = ns.Name
	require.NoError(t, alice.Create(ctx, a))
	requireDenied(t, alice.Delete(ctx, a), "an Approval cannot be deleted")

	// envtest runs no namespace controller, so the namespace stays
	// Terminating; its Approvals may go now, as the controller would need.
	// The API server's admission reads namespaceObject from its own
	// informer, which sees the deletionTimestamp a moment after the Delete
	// returns (CI once ran the Delete first): wait for that, not for time.
	require.NoError(t, env.Client.Delete(ctx, ns))
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.NoError(c, alice.Delete(ctx, a, client.DryRunAll))
	}, time.Minute, 50*time.Millisecond, "the Approval of a terminating namespace may be deleted")
	require.NoError(t, alice.Delete(ctx, a))
}

func FuzzParse(f *testing.F) {
	f.Add(config.AdmissionPolicies)
	f.Add([]byte("apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingAdmissionPolicyBinding\nmetadata: {name: b}\nspec: {policyName: missing}\n"))
	f.Add([]byte("---\n---\n# nothing\n"))
	f.Add([]byte("apiVersion: v1\nkind: Secret\n"))
	f.Add([]byte("{]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := admission.Parse(data)
		if err != nil {
			return
		}
		if len(p.Policies) == 0 {
			t.Fatal("Parse succeeded without a policy")
		}
	})
}

// A ChangeRequest near etcd's request limit (about 1 MiB of findings, 500
// of them) is still evaluated by the policies rather than refused for CEL
// cost.
func TestChangeRequest_largeSpecStaysWithinTheCELCostBudget(t *testing.T) {
	ctx := context.Background()
	cr := changeRequest()
	for i := 0; i < 500; i++ {
		cr.Spec.Verdict.Findings = append(cr.Spec.Verdict.Findings, sluicev1.Finding{
			Severity: sluicev1.SeverityWarn, Policy: strings.Repeat("p", 100), Resource: strings.Repeat("r", 200),
			Message: strings.Repeat("m", 1600), File: strings.Repeat("f", 100), Line: int32(i),
		})
	}
	cr.Spec.CommitMessage = strings.Repeat("c", 4096)
	require.NoError(t, syncer.Create(ctx, cr))

	var live sluicev1.ChangeRequest
	require.NoError(t, operator.Get(ctx, client.ObjectKeyFromObject(cr), &live))
	live.Finalizers = []string{"gitops.sluice.dev/test"}
	require.NoError(t, operator.Update(ctx, &live), "a metadata update of the largest ChangeRequest is evaluated, not refused for cost")
	live.Spec.Verdict.Findings[499].Message = "changed"
	requireDenied(t, operator.Update(ctx, &live), "spec")
}
