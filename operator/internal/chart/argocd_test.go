package chart_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// argoNS is where the Argo CD render tests put Argo CD: not the default
// "argocd", so every object must follow argocd.namespace.
const argoNS = "gitops-argocd"

// cmpPlugin is the part of Argo CD's ConfigManagementPlugin the chart sets.
type cmpPlugin struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Generate struct {
			Command []string `json:"command"`
			Args    []string `json:"args"`
		} `json:"generate"`
	} `json:"spec"`
}

// argoRules returns every rule of every Role and ClusterRole the chart
// renders that names the argoproj.io group, keyed by "Kind namespace/name".
func argoRules(r *rendered) map[string][]rbacv1.PolicyRule {
	out := map[string][]rbacv1.PolicyRule{}
	add := func(key string, rules []rbacv1.PolicyRule) {
		for _, rule := range rules {
			for _, g := range rule.APIGroups {
				if g == "argoproj.io" || g == "*" {
					out[key] = append(out[key], rule)
				}
			}
		}
	}
	for _, cr := range all[*rbacv1.ClusterRole](r) {
		add("ClusterRole "+cr.Name, cr.Rules)
	}
	for _, role := range all[*rbacv1.Role](r) {
		add("Role "+role.Namespace+"/"+role.Name, role.Rules)
	}
	return out
}

func TestChart_argocdOffRendersNothingOfArgoCD(t *testing.T) {
	r := renderChart(t, "")
	require.Empty(t, r.denies())
	assert.Empty(t, argoRules(r), "argoproj.io rights without argocd.enabled")
	for _, o := range r.objects {
		assert.NotEqual(t, "argocd", o.GetNamespace(), "%T %s rendered into Argo CD's namespace", o, o.GetName())
		assert.NotEqual(t, "argocd", o.GetLabels()["app.kubernetes.io/component"], "%T %s is an Argo CD object", o, o.GetName())
		assert.NotContains(t, o.GetName(), "argocd", "%T %s", o, o.GetName())
	}
	op := args(find[*appsv1.Deployment](t, r, "sluice-operator").Spec.Template.Spec.Containers[0])
	assert.Equal(t, "false", op["argocd-apply"], "the operator would drive Argo CD without the chart's rights for it")
	assert.NotContains(t, op, "argocd-namespace")
}

func TestChart_argocdOnGrantsTheOperatorAppProjectsOnly(t *testing.T) {
	r := renderChart(t, "argocd: {enabled: true, namespace: "+argoNS+"}\n")
	require.Empty(t, r.denies())

	// Exactly one argoproj.io rule in the whole chart: appprojects, with the
	// verbs the applier uses (project.go: Get, Create, Update), in a Role in
	// Argo CD's namespace. No ClusterRole names argoproj.io.
	assert.Equal(t, map[string][]rbacv1.PolicyRule{
		"Role " + argoNS + "/sluice-operator-appprojects": {{
			APIGroups: []string{"argoproj.io"}, Resources: []string{"appprojects"}, Verbs: []string{"get", "create", "update"},
		}},
	}, argoRules(r))
	rb := find[*rbacv1.RoleBinding](t, r, "sluice-operator-appprojects")
	assert.Equal(t, argoNS, rb.Namespace)
	assert.Equal(t, rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "sluice-operator-appprojects"}, rb.RoleRef)
	assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: operatorSA.Name, Namespace: releaseNS}}, rb.Subjects)
	for _, crb := range all[*rbacv1.ClusterRoleBinding](r) {
		assert.NotEqual(t, "sluice-operator-appprojects", crb.RoleRef.Name, "AppProject rights bound cluster-wide by %s", crb.Name)
	}

	op := args(find[*appsv1.Deployment](t, r, "sluice-operator").Spec.Template.Spec.Containers[0])
	assert.Equal(t, "true", op["argocd-apply"])
	assert.Equal(t, argoNS, op["argocd-namespace"], "the operator would keep AppProjects where it has no rights")
}

func TestChart_argocdPluginRunsTheOperatorWithoutAShell(t *testing.T) {
	r := renderChart(t, "argocd: {enabled: true, namespace: "+argoNS+"}\n")
	require.Empty(t, r.denies())
	cm := find[*corev1.ConfigMap](t, r, "sluice-argocd-cmp")
	assert.Equal(t, argoNS, cm.Namespace)
	var p cmpPlugin
	require.NoError(t, yaml.UnmarshalStrict([]byte(cm.Data["plugin.yaml"]), &p), "plugin.yaml:\n%s", cm.Data["plugin.yaml"])
	assert.Equal(t, "argoproj.io/v1alpha1", p.APIVersion)
	assert.Equal(t, "ConfigManagementPlugin", p.Kind)
	assert.Equal(t, "sluice", p.Metadata.Name)
	cmd := p.Spec.Generate.Command
	require.GreaterOrEqual(t, len(cmd), 3)
	// Argo CD runs command[0] with the rest as its arguments: no shell may
	// interpret anything a repository or an Application could put there.
	assert.Equal(t, []string{"operator", "argocd-cmp", "generate"}, cmd[:3])
	assert.Empty(t, p.Spec.Generate.Args)
	for _, a := range cmd {
		assert.NotContains(t, []string{"sh", "bash", "-c"}, a)
		assert.NotContains(t, a, "$", "%q would need a shell", a)
	}
	flags := args(corev1.Container{Args: cmd[3:]})
	assert.Equal(t, "/etc/sluice/tokens/artifact-token", flags["artifact-token-file"])
	// The plugin verifies against the same artifact server and renders for
	// the same Kubernetes version as the operator and the validator, or
	// nothing would ever match manifestDigest.
	op := args(find[*appsv1.Deployment](t, r, "sluice-operator").Spec.Template.Spec.Containers[0])
	assert.Equal(t, op["artifact-base-url"], flags["artifact-base-url"])
	assert.Equal(t, op["helm-kube-version"], flags["helm-kube-version"])
	assert.Len(t, flags, 3, "%v", cmd)
}

func TestChart_argocdRepoServerMayOnlyGetReleasesAndChangeRequests(t *testing.T) {
	read := []rbacv1.PolicyRule{{APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"releases", "changerequests"}, Verbs: []string{"get"}}}
	repoServer := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "argocd-repo-server", Namespace: argoNS}}
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sluice-argocd-cmp"}

	t.Run("all namespaces", func(t *testing.T) {
		r := renderChart(t, "argocd: {enabled: true, namespace: "+argoNS+"}\n")
		require.Empty(t, r.denies())
		assert.Equal(t, read, find[*rbacv1.ClusterRole](t, r, "sluice-argocd-cmp").Rules)
		crb := find[*rbacv1.ClusterRoleBinding](t, r, "sluice-argocd-cmp")
		assert.Equal(t, ref, crb.RoleRef)
		assert.Equal(t, repoServer, crb.Subjects)
	})
	t.Run("the served namespaces only", func(t *testing.T) {
		r := renderChart(t, "argocd: {enabled: true, namespace: "+argoNS+", repoServer: {serviceAccountName: repo}}\noperator: {watchNamespaces: [team-a, team-b]}\n")
		require.Empty(t, r.denies())
		assert.Equal(t, read, find[*rbacv1.ClusterRole](t, r, "sluice-argocd-cmp").Rules)
		for _, crb := range all[*rbacv1.ClusterRoleBinding](r) {
			assert.NotEqual(t, "sluice-argocd-cmp", crb.Name, "the plugin reads Releases cluster-wide")
		}
		var where []string
		for _, rb := range all[*rbacv1.RoleBinding](r) {
			if rb.Name == "sluice-argocd-cmp" {
				where = append(where, rb.Namespace)
				assert.Equal(t, ref, rb.RoleRef)
				assert.Equal(t, []rbacv1.Subject{{Kind: "ServiceAccount", Name: "repo", Namespace: argoNS}}, rb.Subjects)
			}
		}
		assert.Equal(t, []string{"team-a", "team-b"}, where)
	})
}

func TestChart_argocdPluginGetsTheOperatorsArtifactToken(t *testing.T) {
	r := renderChart(t, "argocd: {enabled: true, namespace: "+argoNS+"}\n")
	require.Empty(t, r.denies())
	tokens := find[*corev1.Secret](t, r, "sluice-tokens")
	var cmp *corev1.Secret
	for _, s := range all[*corev1.Secret](r) {
		if s.Name == "sluice-argocd-cmp" {
			cmp = s
		}
	}
	require.NotNil(t, cmp, "no artifact token Secret for the plugin")
	assert.Equal(t, argoNS, cmp.Namespace)
	// The chart's random token, rendered once for both Secrets.
	require.NotEmpty(t, tokens.Data["artifact-token"])
	assert.Equal(t, map[string][]byte{"artifact-token": tokens.Data["artifact-token"]}, cmp.Data, "the plugin must hold the artifact token and nothing else (not the runner's)")

	// With a Secret of one's own the chart cannot read the token: it
	// renders no copy (charts/sluice/README.md says how to make one).
	r = renderChart(t, "argocd: {enabled: true, namespace: "+argoNS+"}\ntokens: {existingSecret: mine}\n")
	require.Empty(t, r.denies())
	assert.Empty(t, all[*corev1.Secret](r))
}

func TestChart_argocdRepoServerMayFetchArtifacts(t *testing.T) {
	r := renderChart(t, "argocd: {enabled: true, namespace: "+argoNS+"}\n")
	require.Empty(t, r.denies())
	np := find[*networkingv1.NetworkPolicy](t, r, "sluice-syncer")
	found := false
	for _, rule := range np.Spec.Ingress {
		for _, peer := range rule.From {
			if peer.NamespaceSelector == nil || peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != argoNS {
				continue
			}
			found = true
			require.NotNil(t, peer.PodSelector, "every pod of Argo CD's namespace may fetch artifacts")
			assert.Equal(t, map[string]string{"app.kubernetes.io/name": "argocd-repo-server"}, peer.PodSelector.MatchLabels)
			require.Len(t, rule.Ports, 1)
			assert.Equal(t, int32(9090), rule.Ports[0].Port.IntVal, "Argo CD may reach more than the artifact server")
		}
	}
	assert.True(t, found, "the syncer's NetworkPolicy keeps Argo CD's repo-server from the artifacts")
}

// TestChart_argocdRightsInTheCluster asks the API server's RBAC authorizer
// what the installed chart (installValues: argocd.enabled) lets the
// operator and Argo CD's repo-server do.
func TestChart_argocdRightsInTheCluster(t *testing.T) {
	repoServer := types.NamespacedName{Namespace: "argocd", Name: "argocd-repo-server"}
	g := sluicev1.GroupVersion.Group
	ra := func(ns, verb, group, resource string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: group, Resource: resource}
	}
	for _, tc := range []struct {
		name  string
		sa    types.NamespacedName
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		{"the operator creates AppProjects in Argo CD's namespace", operatorSA, ra("argocd", "create", "argoproj.io", "appprojects"), true},
		{"the operator updates AppProjects in Argo CD's namespace", operatorSA, ra("argocd", "update", "argoproj.io", "appprojects"), true},
		{"the operator may not delete AppProjects", operatorSA, ra("argocd", "delete", "argoproj.io", "appprojects"), false},
		{"the operator may not create AppProjects elsewhere", operatorSA, ra(controlNS, "create", "argoproj.io", "appprojects"), false},
		{"the operator may not create AppProjects cluster-wide", operatorSA, ra("", "create", "argoproj.io", "appprojects"), false},
		{"the operator may not write Applications itself", operatorSA, ra(controlNS, "create", "argoproj.io", "applications"), false},
		{"the operator may not read Argo CD's Secrets", operatorSA, ra("argocd", "get", "", "secrets"), false},
		{"the repo-server gets ChangeRequests in a served namespace", repoServer, ra(controlNS, "get", g, "changerequests"), true},
		{"the repo-server gets Releases in a served namespace", repoServer, ra(controlNS, "get", g, "releases"), true},
		{"the repo-server may not list ChangeRequests", repoServer, ra(controlNS, "list", g, "changerequests"), false},
		{"the repo-server may not update ChangeRequests", repoServer, ra(controlNS, "update", g, "changerequests"), false},
		{"the repo-server may not read Approvals", repoServer, ra(controlNS, "get", g, "approvals"), false},
		{"the repo-server may not read ChangeRequests where Sluice does not serve", repoServer, ra("elsewhere", "get", g, "changerequests"), false},
		{"the repo-server may not read Secrets", repoServer, ra(controlNS, "get", "", "secrets"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, allowed(t, tc.sa, tc.attrs))
		})
	}
	// The plugin's token Secret is in Argo CD's namespace and equals the
	// operator's, as installed.
	var tokens, cmp corev1.Secret
	require.NoError(t, env.Client.Get(context.Background(), types.NamespacedName{Namespace: releaseNS, Name: "sluice-tokens"}, &tokens))
	require.NoError(t, env.Client.Get(context.Background(), types.NamespacedName{Namespace: "argocd", Name: "sluice-argocd-cmp"}, &cmp))
	assert.Equal(t, tokens.Data["artifact-token"], cmp.Data["artifact-token"])
	assert.Len(t, cmp.Data["artifact-token"], 48)
}
