package chart_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

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

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/admission"
)

func newClient(t *testing.T, cfg *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	return c
}

// clusterAdmin returns a user bound to cluster-admin: RBAC lets it do
// anything, so whatever it is refused, admission refused.
func clusterAdmin(t *testing.T, name string) client.Client {
	t.Helper()
	ctx := context.Background()
	cfg, err := env.AddUser(name, "platform")
	require.NoError(t, err)
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "test-admin-" + name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}},
	}
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, crb)))
	// The authorizer learns of the binding through an informer.
	require.Eventually(t, func() bool {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: name, Groups: []string{"platform", "system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: controlNS, Verb: "delete", Group: sluicev1.GroupVersion.Group, Resource: "approvals"},
		}}
		return env.Client.Create(ctx, sar) == nil && sar.Status.Allowed
	}, defaultWait, pollEvery)
	return newClient(t, cfg)
}

func changeRequest(name string) *sluicev1.ChangeRequest {
	d := sluicev1.SHA256Digest([]byte(name))
	return &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controlNS},
		Spec: sluicev1.ChangeRequestSpec{
			Release:         "checkout-prod",
			Revision:        strings.Repeat("a", 40),
			TargetNamespace: "checkout-prod",
			Artifact:        sluicev1.ArtifactReference{URL: "http://sluice-syncer." + releaseNS + ".svc:9090/artifacts/x.tar.gz", SHA256: d},
			ContentDigest:   d,
			Verdict:         sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			ApprovalDigest:  d,
		},
	}
}

func planSecret(name string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controlNS, Labels: map[string]string{sluicev1.LabelChangeRequest: "checkout-prod-aaaaaaaaaa"}},
		Data:       map[string][]byte{"plan": []byte("not really a plan")},
	}
}

func prApproval(name string) *sluicev1.Approval {
	return &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: controlNS},
		Spec: sluicev1.ApprovalSpec{
			Release:        "checkout-prod",
			ApprovalDigest: sluicev1.SHA256Digest([]byte(name)),
			Decision:       sluicev1.DecisionApprove,
			Approver:       "github:alice",
			Source:         sluicev1.SourcePullRequest,
			PullRequest:    7,
			ReviewID:       42,
		},
	}
}

// TestChart_admissionTrustsExactlyTheChartsServiceAccounts installs nothing
// by hand: the policies, bindings and parameter ConfigMap are the chart's,
// in the chart's namespace, and the actors authenticate with real tokens of
// the chart's ServiceAccounts, so the chart's RBAC and the chart's
// admission decide together.
func TestChart_admissionTrustsExactlyTheChartsServiceAccounts(t *testing.T) {
	ctx := context.Background()
	admin := clusterAdmin(t, "carol")
	syncer := newClient(t, syncerCfg)
	operator := newClient(t, operatorCfg)

	t.Run("a cluster admin may not create a ChangeRequest, the syncer may", func(t *testing.T) {
		err := admin.Create(ctx, changeRequest("by-admin"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "only the gitops-syncer's ServiceAccount may create a ChangeRequest")
		require.NoError(t, syncer.Create(ctx, changeRequest("by-syncer")))
	})
	t.Run("the operator may neither create a ChangeRequest nor change its spec, but writes its status", func(t *testing.T) {
		err := operator.Create(ctx, changeRequest("by-operator"))
		assert.True(t, apierrors.IsForbidden(err), "want forbidden by RBAC, got %v", err)

		cr := changeRequest("for-status")
		require.NoError(t, syncer.Create(ctx, cr))
		cr.Status.Phase = sluicev1.PhasePending
		require.NoError(t, operator.Status().Update(ctx, cr))
		got := &sluicev1.ChangeRequest{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cr), got))
		assert.Equal(t, sluicev1.PhasePending, got.Status.Phase)
	})
	t.Run("only the syncer creates plan Secrets", func(t *testing.T) {
		err := admin.Create(ctx, planSecret("plan-by-admin"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "may create a plan Secret")
		require.NoError(t, syncer.Create(ctx, planSecret("plan-by-syncer")))
		err = operator.Create(ctx, planSecret("plan-by-operator"))
		assert.True(t, apierrors.IsForbidden(err), "want forbidden, got %v", err)
	})
	t.Run("only the syncer records pull-request approvals, and only the operator removes approvals", func(t *testing.T) {
		err := admin.Create(ctx, prApproval("pr-by-admin"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "only the gitops-syncer's ServiceAccount may create an Approval from source pull-request")

		a := prApproval("pr-by-syncer")
		require.NoError(t, syncer.Create(ctx, a))
		err = admin.Delete(ctx, a)
		require.Error(t, err)
		assert.Contains(t, err.Error(), "only the Sluice operator removes Approvals")
		err = syncer.Delete(ctx, a)
		assert.True(t, apierrors.IsForbidden(err), "want forbidden, got %v", err)
		require.NoError(t, operator.Delete(ctx, a))
	})
	t.Run("the syncer never writes ApprovalPolicies, even with the rights for it", func(t *testing.T) {
		// Give the syncer RBAC for ApprovalPolicies in a namespace of its
		// own, so only admission is left to refuse.
		const ns = "too-generous"
		require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
		role := &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Name: "too-generous", Namespace: ns},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"approvalpolicies"}, Verbs: []string{"create"}}},
		}
		require.NoError(t, env.Client.Create(ctx, role))
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "too-generous", Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: syncerSA.Namespace, Name: syncerSA.Name}},
		}
		require.NoError(t, env.Client.Create(ctx, rb))
		ap := &sluicev1.ApprovalPolicy{ObjectMeta: metav1.ObjectMeta{Name: "lower-the-floor", Namespace: ns}}
		require.Eventually(t, func() bool {
			err := syncer.Create(ctx, ap, client.DryRunAll)
			return err != nil && strings.Contains(err.Error(), "never writes ApprovalPolicies")
		}, defaultWait, pollEvery)
	})
}

// TestChart_operatorAppliesOnlyAsTheRepositorysServiceAccount: with its own
// token, the operator may act as any Repository's ServiceAccount (the
// appliers' impersonation); the syncer may not.
func TestChart_operatorAppliesOnlyAsTheRepositorysServiceAccount(t *testing.T) {
	ctx := context.Background()
	deployer := "system:serviceaccount:" + controlNS + ":deployer"
	whoAmI := func(cfg *rest.Config) (*authenticationv1.SelfSubjectReview, error) {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: deployer}
		cs, err := kubernetes.NewForConfig(c)
		require.NoError(t, err)
		return cs.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	}
	got, err := whoAmI(operatorCfg)
	require.NoError(t, err)
	assert.Equal(t, deployer, got.Status.UserInfo.Username)
	assert.Contains(t, got.Status.UserInfo.Groups, "system:serviceaccounts:"+controlNS)

	_, err = whoAmI(syncerCfg)
	assert.True(t, apierrors.IsForbidden(err), "the syncer must not impersonate: %v", err)

	// Impersonating a user that is not a ServiceAccount is not granted.
	assert.False(t, allowed(t, operatorSA, authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "users", Name: "alice"}))
	assert.False(t, allowed(t, operatorSA, authorizationv1.ResourceAttributes{Verb: "impersonate", Resource: "groups", Name: "system:masters"}))
}

// allowed asks the API server whether the ServiceAccount may do attrs.
func allowed(t *testing.T, sa types.NamespacedName, attrs authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:               admission.ServiceAccountUsername(sa),
		Groups:             admission.ServiceAccountGroups(sa),
		ResourceAttributes: &attrs,
	}}
	require.NoError(t, env.Client.Create(context.Background(), sar))
	return sar.Status.Allowed
}

// rbacMarker is one verb on one resource from a +kubebuilder:rbac marker.
type rbacMarker struct {
	file                               string
	group, resource, subresource, verb string
}

var markerLine = regexp.MustCompile(`^\s*//\s*\+kubebuilder:rbac:(.*)$`)

// rbacMarkers reads every +kubebuilder:rbac marker of the non-test Go files
// under dir.
func rbacMarkers(t *testing.T, dir string) []rbacMarker {
	t.Helper()
	var out []rbacMarker
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			m := markerLine.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			kv := map[string]string{}
			for _, part := range strings.Split(m[1], ",") {
				k, v, _ := strings.Cut(part, "=")
				kv[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"`)
			}
			rel, _ := filepath.Rel(dir, path)
			for _, group := range strings.Split(kv["groups"], ";") {
				for _, res := range strings.Split(kv["resources"], ";") {
					resource, sub, _ := strings.Cut(res, "/")
					for _, verb := range strings.Split(kv["verbs"], ";") {
						out = append(out, rbacMarker{file: rel, group: group, resource: resource, subresource: sub, verb: verb})
					}
				}
			}
		}
		return sc.Err()
	})
	require.NoError(t, err)
	return out
}

// TestChart_rbacGrantsWhatTheCodeAsksFor: every verb a +kubebuilder:rbac
// marker of a component's code asks for is granted to that component's
// ServiceAccount in a control namespace. A new marker without a matching
// chart rule fails here.
func TestChart_rbacGrantsWhatTheCodeAsksFor(t *testing.T) {
	for _, tc := range []struct {
		component string
		dir       string
		sa        types.NamespacedName
	}{
		{"operator", "..", operatorSA}, // operator/internal
		{"syncer", "../../../gitops-syncer/internal", syncerSA},
	} {
		t.Run(tc.component, func(t *testing.T) {
			markers := rbacMarkers(t, tc.dir)
			require.NotEmpty(t, markers, "no +kubebuilder:rbac markers found under %s", tc.dir)
			for _, m := range markers {
				assert.True(t, allowed(t, tc.sa, authorizationv1.ResourceAttributes{
					Namespace: controlNS, Verb: m.verb, Group: m.group, Resource: m.resource, Subresource: m.subresource,
				}), "%s (%s) asks for %s on %s/%s %s, which the chart does not grant", tc.component, m.file, m.verb, m.group, m.resource, m.subresource)
			}
		})
	}
}

// TestChart_rbacIsLeastPrivilege lists what each component must not be able
// to do (DESIGN.md §6.5): the operator never writes what the syncer writes
// and touches Secrets (Terraform state) only in the namespaces it serves;
// the syncer never writes status of changes, never deletes Approvals, never
// impersonates, and reads Secrets with get only, in the namespaces it
// serves only. Leader election stays in the release namespace.
func TestChart_rbacIsLeastPrivilege(t *testing.T) {
	ra := func(verb, group, resource, sub string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: controlNS, Verb: verb, Group: group, Resource: resource, Subresource: sub}
	}
	in := func(ns string, a authorizationv1.ResourceAttributes) authorizationv1.ResourceAttributes {
		a.Namespace = ns
		return a
	}
	g := sluicev1.GroupVersion.Group
	for _, tc := range []struct {
		name  string
		sa    types.NamespacedName
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{"the operator may not create ChangeRequests", operatorSA, ra("create", g, "changerequests", ""), false},
		{"the operator may not create Releases", operatorSA, ra("create", g, "releases", ""), false},
		{"the operator may not create Approvals", operatorSA, ra("create", g, "approvals", ""), false},
		{"the operator may not write ApprovalPolicies", operatorSA, ra("update", g, "approvalpolicies", ""), false},
		{"the operator reads Terraform state Secrets in the namespaces it serves", operatorSA, ra("get", "", "secrets", ""), true},
		{"the operator may not list Secrets", operatorSA, ra("list", "", "secrets", ""), false},
		{"the operator may not watch Secrets", operatorSA, ra("watch", "", "secrets", ""), false},
		{"the operator may not delete Secrets", operatorSA, ra("delete", "", "secrets", ""), false},
		{"the operator writes Terraform state Secrets", operatorSA, ra("update", "", "secrets", ""), true},
		{"the operator may not read Secrets in a namespace it does not serve", operatorSA, in("elsewhere", ra("get", "", "secrets", "")), false},
		{"the operator may not read Secrets of its own namespace", operatorSA, in(releaseNS, ra("get", "", "secrets", "")), false},
		{"the operator may not create Deployments itself", operatorSA, ra("create", "apps", "deployments", ""), false},
		{"live compliance watches ConfigMaps", operatorSA, ra("watch", "", "configmaps", ""), true},
		{"live compliance may not change ConfigMaps", operatorSA, ra("update", "", "configmaps", ""), false},
		{"live compliance may not change Deployments", operatorSA, ra("patch", "apps", "deployments", ""), false},
		{"live compliance writes Reports", operatorSA, ra("update", "openreports.io", "reports", ""), true},
		{"the operator may impersonate ServiceAccounts", operatorSA, ra("impersonate", "", "serviceaccounts", ""), true},
		{"the operator writes ChangeRequest status", operatorSA, ra("update", g, "changerequests", "status"), true},
		{"the operator takes Terraform state locks in the namespaces it serves", operatorSA, ra("create", "coordination.k8s.io", "leases", ""), true},
		{"the operator may not take leases in a namespace it does not serve", operatorSA, in("elsewhere", ra("create", "coordination.k8s.io", "leases", "")), false},
		{"the syncer may not take leases in a namespace it does not serve", syncerSA, in("elsewhere", ra("create", "coordination.k8s.io", "leases", "")), false},
		{"the syncer may not impersonate", syncerSA, ra("impersonate", "", "serviceaccounts", ""), false},
		{"the syncer may not write ChangeRequest status", syncerSA, ra("update", g, "changerequests", "status"), false},
		{"the syncer may not change ChangeRequests", syncerSA, ra("update", g, "changerequests", ""), false},
		{"the syncer may not delete Approvals", syncerSA, ra("delete", g, "approvals", ""), false},
		{"the syncer may not delete Releases (it proposes Delete changes)", syncerSA, ra("delete", g, "releases", ""), false},
		{"the operator deletes Releases (approved Delete changes)", operatorSA, ra("delete", g, "releases", ""), true},
		{"the syncer may not write ApprovalPolicies", syncerSA, ra("create", g, "approvalpolicies", ""), false},
		{"the syncer may not delete Secrets", syncerSA, ra("delete", "", "secrets", ""), false},
		{"the syncer reads the Secrets its Repositories name", syncerSA, ra("get", "", "secrets", ""), true},
		{"the syncer may not list Secrets", syncerSA, ra("list", "", "secrets", ""), false},
		{"the syncer may not watch Secrets", syncerSA, ra("watch", "", "secrets", ""), false},
		{"the syncer may not read Secrets in a namespace it does not serve", syncerSA, in("elsewhere", ra("get", "", "secrets", "")), false},
		{"the syncer may not read Secrets of its own namespace", syncerSA, in(releaseNS, ra("get", "", "secrets", "")), false},
		{"the syncer may not list Secrets cluster-wide", syncerSA, in("", ra("list", "", "secrets", "")), false},
		{"the syncer never writes Terraform state (plans only read it)", syncerSA, ra("update", "", "secrets", ""), false},
		{"the syncer may not create Deployments", syncerSA, ra("create", "apps", "deployments", ""), false},
		{"the syncer creates plan Secrets", syncerSA, ra("create", "", "secrets", ""), true},
		{"the syncer locks Terraform state", syncerSA, ra("update", "coordination.k8s.io", "leases", ""), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, allowed(t, tc.sa, tc.attrs))
		})
	}
	for _, sa := range []types.NamespacedName{operatorSA, syncerSA} {
		attrs := authorizationv1.ResourceAttributes{Namespace: releaseNS, Verb: "update", Group: "coordination.k8s.io", Resource: "leases"}
		assert.True(t, allowed(t, sa, attrs), "%s cannot renew its leader election lease", sa.Name)
	}
}

// TestChart_userRolesLetApproversApproveAndViewersOnlyLook binds the chart's
// sluice-viewer and sluice-approver in the control namespace.
func TestChart_userRolesLetApproversApproveAndViewersOnlyLook(t *testing.T) {
	ctx := context.Background()
	sar := func(user, verb, resource string) bool {
		s := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: []string{"system:authenticated"},
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: controlNS, Verb: verb, Group: sluicev1.GroupVersion.Group, Resource: resource},
		}}
		require.NoError(t, env.Client.Create(ctx, s))
		return s.Status.Allowed
	}
	for user, role := range map[string]string{"vera": "sluice-viewer", "arun": "sluice-approver"} {
		require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: user, Namespace: controlNS},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
		}))
	}
	require.Eventually(t, func() bool { return sar("arun", "create", "approvals") }, defaultWait, pollEvery)
	var got []string
	for _, user := range []string{"vera", "arun"} {
		for _, verb := range []string{"get", "list", "create", "update", "delete"} {
			for _, res := range []string{"changerequests", "approvals"} {
				if sar(user, verb, res) {
					got = append(got, user+" "+verb+" "+res)
				}
			}
		}
	}
	sort.Strings(got)
	assert.Equal(t, []string{
		"arun create approvals", "arun get approvals", "arun get changerequests", "arun list approvals", "arun list changerequests",
		"vera get approvals", "vera get changerequests", "vera list approvals", "vera list changerequests",
	}, got)
}
