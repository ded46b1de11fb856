package helm

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
)

// reachFixture is a fixture with the "reach" chart.
func reachFixture(t *testing.T) *fixture {
	f := newFixture(t)
	f.chart = "reach"
	f.release.Spec.Chart.Path = "charts/reach"
	return f
}

// TestApply_aStagingChartWithAnObjectForProdIsRefusedAndInstallsNothing:
// the Repository's ServiceAccount may write into the prod namespace too, so
// only the gate keeps a staging change out of it, even one the validator
// never saw (its manifestDigest is honest).
func TestApply_aStagingChartWithAnObjectForProdIsRefusedAndInstallsNothing(t *testing.T) {
	f := reachFixture(t)
	ctx := context.Background()
	prod := strings.Replace(f.target, "staging", "prod", 1)
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prod}}))
	require.NoError(t, env.GrantRole(ctx, prod, "deployer", types.NamespacedName{Namespace: f.ctl, Name: "deployer"},
		[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"*"}, Verbs: []string{"*"}}},
		authorizationv1.ResourceAttributes{Verb: "create", Resource: "configmaps"}))

	_, err := f.apply(f.change("foreign: "+prod+"\n", changeOpts{}))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonOutsideNamespace)
	require.Contains(t, fail.Message, "namespace "+prod)
	f.requireNothingInstalled()
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: prod, Name: f.release.Name + "-planted"}, &corev1.ConfigMap{})
	require.True(t, apierrors.IsNotFound(err), "nothing in %s: %v", prod, err)

	// The Repository may allow the namespace by name.
	f.repo.Spec.AllowedExtraNamespaces = []string{"web-prod-*"}
	_, err = f.apply(f.change("foreign: "+prod+"\n", changeOpts{}))
	require.NoError(t, err)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: prod, Name: f.release.Name + "-planted"}, &corev1.ConfigMap{}))
}

// TestApply_aClusterRoleBindingIsRefusedUnlessTheRepositoryAllowsIt: the
// ServiceAccount may create ClusterRoleBindings; the gate refuses one the
// Repository does not list, installing nothing.
func TestApply_aClusterRoleBindingIsRefusedUnlessTheRepositoryAllowsIt(t *testing.T) {
	f := reachFixture(t)
	ctx := context.Background()
	grantClusterRole(t, f, []rbacv1.PolicyRule{
		{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterrolebindings"}, Verbs: []string{"*"}},
		{APIGroups: []string{rbacv1.GroupName}, Resources: []string{"clusterroles"}, Verbs: []string{"bind"}, ResourceNames: []string{"view"}},
	}, authorizationv1.ResourceAttributes{Verb: "create", Group: rbacv1.GroupName, Resource: "clusterrolebindings"})
	crb := client.ObjectKey{Name: f.target + "-viewer"}

	_, err := f.apply(f.change("clusterRoleBinding: true\n", changeOpts{}))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonOutsideNamespace)
	require.Contains(t, fail.Message, "ClusterRoleBinding")
	f.requireNothingInstalled()
	err = env.Client.Get(ctx, crb, &rbacv1.ClusterRoleBinding{})
	require.True(t, apierrors.IsNotFound(err), "no ClusterRoleBinding: %v", err)

	f.repo.Spec.AllowedClusterKinds = []sluicev1.GroupKind{{Group: rbacv1.GroupName, Kind: "ClusterRoleBinding"}}
	_, err = f.apply(f.change("clusterRoleBinding: true\n", changeOpts{}))
	require.NoError(t, err)
	require.NoError(t, env.Client.Get(ctx, crb, &rbacv1.ClusterRoleBinding{}))
}

// TestApply_aHookRenderingOtherwiseThanApprovedIsRefusedAndRunsNothing:
// the hook renders one way on an install (what the validator renders and
// the approval covers) and another on an upgrade. The install runs the
// approved hook; the upgrade is refused before Helm runs its hook.
func TestApply_aHookRenderingOtherwiseThanApprovedIsRefusedAndRunsNothing(t *testing.T) {
	f := reachFixture(t)
	ctx := context.Background()

	_, err := f.apply(f.change("hook: true\n", changeOpts{}))
	require.NoError(t, err, "the approved hook, as the validator rendered it")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.target, Name: f.release.Name + "-hook"}, &corev1.ConfigMap{}), "the approved hook ran")

	_, err = f.apply(f.change("hook: true\nmessage: upgraded\n", changeOpts{}))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonManifestMismatch)
	require.Contains(t, fail.Error(), "approved sha256:")
	err = env.Client.Get(ctx, client.ObjectKey{Namespace: f.target, Name: f.release.Name + "-hook-unapproved"}, &corev1.ConfigMap{})
	require.True(t, apierrors.IsNotFound(err), "the unapproved hook did not run: %v", err)
	require.Len(t, f.helmHistory(), 1, "no revision 2 was stored")
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "hello", cm.Data["message"], "nothing was upgraded")
}

// TestKindScope_agreesWithTheAPIServer: every kind the API server serves
// in a built-in group has the scope the validator's table gives it, so the
// validator and the applier decide alike.
func TestKindScope_agreesWithTheAPIServer(t *testing.T) {
	dc, err := discovery.NewDiscoveryClientForConfig(env.Config)
	require.NoError(t, err)
	lists, err := dc.ServerPreferredResources()
	require.NoError(t, err)
	table := helmcheck.BuiltinKinds()
	checked := 0
	for _, l := range lists {
		gv, err := schema.ParseGroupVersion(l.GroupVersion)
		require.NoError(t, err)
		if strings.HasSuffix(gv.Group, "argoproj.io") || strings.HasSuffix(gv.Group, "sluice.dev") || gv.Group == "openreports.io" {
			continue // CRDs installed by the test environment (Argo CD's, Sluice's, the compliance Report)
		}
		for _, r := range l.APIResources {
			if strings.Contains(r.Name, "/") {
				continue // subresources
			}
			gk := schema.GroupKind{Group: gv.Group, Kind: r.Kind}
			namespaced, ok := table[gk]
			if !ok {
				t.Errorf("%s is served but not in the validator's table (namespaced: %v)", gk, r.Namespaced)
				continue
			}
			if namespaced != r.Namespaced {
				t.Errorf("%s: the table says namespaced=%v, the API server %v", gk, namespaced, r.Namespaced)
			}
			checked++
		}
	}
	require.Greater(t, checked, 40)
}

// grantClusterRole gives the fixture's ServiceAccount a ClusterRole with
// rules and waits until the API server allows probe.
func grantClusterRole(t *testing.T, f *fixture, rules []rbacv1.PolicyRule, probe authorizationv1.ResourceAttributes) {
	t.Helper()
	ctx := context.Background()
	name := f.ctl + "-cluster"
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "deployer", Namespace: f.ctl}},
	}))
	require.NoError(t, env.WaitAllowed(ctx, authorizationv1.SubjectAccessReviewSpec{User: f.deployer(), ResourceAttributes: &probe}))
}
