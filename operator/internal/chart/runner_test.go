package chart_test

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// TestChart_runnerHoldsNoCredential: the pod that runs code anyone who can
// push controls has nothing to steal: no ServiceAccount token (neither
// automounted nor projected), no Secret volume, no RBAC, only its own
// bearer token in the environment; non-root, read-only root filesystem, no
// capabilities, RuntimeDefault seccomp, emptyDirs for what it writes.
func TestChart_runnerHoldsNoCredential(t *testing.T) {
	r := renderChart(t, "")
	require.Empty(t, r.denies())
	sa := find[*corev1.ServiceAccount](t, r, "sluice-runner")
	require.NotNil(t, sa.AutomountServiceAccountToken, "the runner's ServiceAccount must say automountServiceAccountToken: false")
	assert.False(t, *sa.AutomountServiceAccountToken)

	d := find[*appsv1.Deployment](t, r, "sluice-runner")
	pod := d.Spec.Template.Spec
	assert.Equal(t, sa.Name, pod.ServiceAccountName)
	require.NotNil(t, pod.AutomountServiceAccountToken, "the runner's pod must say automountServiceAccountToken: false")
	assert.False(t, *pod.AutomountServiceAccountToken)
	for _, v := range pod.Volumes {
		assert.Nil(t, v.Secret, "volume %s mounts a Secret", v.Name)
		assert.Nil(t, v.Projected, "volume %s is projected (a ServiceAccount token or a Secret)", v.Name)
		assert.Nil(t, v.HostPath, "volume %s is a host path", v.Name)
		assert.NotNil(t, v.EmptyDir, "volume %s is not an emptyDir", v.Name)
	}
	require.NotNil(t, pod.SecurityContext)
	assert.True(t, *pod.SecurityContext.RunAsNonRoot)
	require.NotNil(t, pod.SecurityContext.SeccompProfile)
	assert.Equal(t, corev1.SeccompProfileTypeRuntimeDefault, pod.SecurityContext.SeccompProfile.Type)
	assert.False(t, pod.HostNetwork || pod.HostPID || pod.HostIPC)

	require.Len(t, pod.Containers, 1)
	assert.Empty(t, pod.InitContainers)
	c := pod.Containers[0]
	sc := c.SecurityContext
	require.NotNil(t, sc)
	assert.True(t, *sc.RunAsNonRoot)
	assert.True(t, *sc.ReadOnlyRootFilesystem)
	assert.False(t, *sc.AllowPrivilegeEscalation)
	assert.Equal(t, []corev1.Capability{"ALL"}, sc.Capabilities.Drop)
	assert.Empty(t, sc.Capabilities.Add)
	assert.Empty(t, c.EnvFrom, "no Secret or ConfigMap is poured into the environment")
	var fromSecrets []string
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			fromSecrets = append(fromSecrets, e.Name+"="+e.ValueFrom.SecretKeyRef.Name+"/"+e.ValueFrom.SecretKeyRef.Key)
		}
	}
	assert.Equal(t, []string{"SLUICE_RUNNER_TOKEN=sluice-tokens/runner-token"}, fromSecrets, "the runner's own token is the one secret it gets")
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	assert.ElementsMatch(t, []string{"/work", "/tmp", "/plugins"}, keys(mounts))

	assert.Equal(t, []string{"infra-validator", "runner", "serve"}, c.Command)
	a := args(c)
	assert.Equal(t, ":8090", a["bind-address"])
	assert.Equal(t, "/work", a["work-dir"])
	assert.Equal(t, "/plugins", a["plugin-cache-dir"])
	assert.Equal(t, "/usr/local/bin/terraform", a["terraform-path"])

	// No binding of any kind names the runner's ServiceAccount.
	for _, b := range all[*rbacv1.ClusterRoleBinding](r) {
		for _, s := range b.Subjects {
			assert.NotEqual(t, sa.Name, s.Name, "ClusterRoleBinding %s", b.Name)
		}
	}
	for _, b := range all[*rbacv1.RoleBinding](r) {
		for _, s := range b.Subjects {
			assert.NotEqual(t, sa.Name, s.Name, "RoleBinding %s", b.Name)
		}
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestChart_callersReachTheRunnerWithItsToken: the syncer and the operator
// send runs to the runner's Service with the runner token, present the
// artifact token, and serve state at their own pod address on the declared
// state port; with the runner off, they run terraform locally and nothing
// of the runner is rendered.
func TestChart_callersReachTheRunnerWithItsToken(t *testing.T) {
	r := renderChart(t, "")
	require.Empty(t, r.denies())
	for _, name := range []string{"sluice-syncer", "sluice-operator"} {
		t.Run(name, func(t *testing.T) {
			pod := find[*appsv1.Deployment](t, r, name).Spec.Template.Spec
			a := args(pod.Containers[0])
			assert.Equal(t, "http://sluice-runner."+releaseNS+".svc:8090", a["terraform-runner"])
			assert.Equal(t, "/etc/sluice/tokens/runner-token", a["terraform-runner-token-file"])
			assert.Equal(t, "/etc/sluice/tokens/artifact-token", a["artifact-token-file"])
			assert.Equal(t, ":8092", a["state-bind-address"])
			assert.Equal(t, "http://$(POD_IP):8092", a["state-base-url"])
			var podIP bool
			for _, e := range pod.Containers[0].Env {
				podIP = podIP || e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP"
			}
			assert.True(t, podIP, "POD_IP comes from status.podIP")
			var tokens *corev1.SecretVolumeSource
			for _, v := range pod.Volumes {
				if v.Name == "tokens" {
					tokens = v.Secret
				}
			}
			require.NotNil(t, tokens)
			assert.Equal(t, "sluice-tokens", tokens.SecretName)
			var items []string
			for _, it := range tokens.Items {
				items = append(items, it.Key)
			}
			assert.ElementsMatch(t, []string{"artifact-token", "runner-token"}, items)
		})
	}
	tokens := find[*corev1.Secret](t, r, "sluice-tokens")
	for _, k := range []string{"runner-token", "artifact-token"} {
		assert.GreaterOrEqual(t, len(tokens.Data[k]), 32, k)
	}
	assert.NotEqual(t, tokens.Data["runner-token"], tokens.Data["artifact-token"])

	off := renderChart(t, "runner: {enabled: false}\ntokens: {existingSecret: my-tokens}\n")
	require.Empty(t, off.denies())
	for _, o := range off.objects {
		assert.NotContains(t, o.GetName(), "runner", "%T %s rendered with the runner off", o, o.GetName())
		_, isSecret := o.(*corev1.Secret)
		assert.False(t, isSecret, "a tokens Secret rendered although tokens.existingSecret is set")
	}
	for _, name := range []string{"sluice-syncer", "sluice-operator"} {
		pod := find[*appsv1.Deployment](t, off, name).Spec.Template.Spec
		a := args(pod.Containers[0])
		assert.NotContains(t, a, "terraform-runner")
		assert.Equal(t, "/etc/sluice/tokens/artifact-token", a["artifact-token-file"])
		for _, v := range pod.Volumes {
			if v.Secret != nil {
				assert.Equal(t, "my-tokens", v.Secret.SecretName)
			}
		}
	}
}

// peer is one side of a connection a NetworkPolicy decides on: a pod of
// the release namespace with these labels, a pod elsewhere, or an address
// outside the cluster.
type peer struct {
	name     string
	labels   map[string]string
	nsLabels map[string]string
	ip       string // set for addresses outside the cluster
}

func component(c string) peer {
	return peer{name: c, labels: map[string]string{"app.kubernetes.io/name": "sluice", "app.kubernetes.io/instance": releaseName, "app.kubernetes.io/component": c},
		nsLabels: map[string]string{"kubernetes.io/metadata.name": releaseNS}}
}

var (
	syncerPod   = component("syncer")
	operatorPod = component("operator")
	runnerPod   = component("runner")
	otherPod    = peer{name: "another pod of the namespace", labels: map[string]string{"app": "intruder"}, nsLabels: map[string]string{"kubernetes.io/metadata.name": releaseNS}}
	kubeDNS     = peer{name: "kube-dns", labels: map[string]string{"k8s-app": "kube-dns"}, nsLabels: map[string]string{"kubernetes.io/metadata.name": "kube-system"}}
	outside     = peer{name: "an address outside the cluster", ip: "203.0.113.7"}
	metadataAPI = peer{name: "the cloud metadata endpoint", ip: "169.254.169.254"}
)

// matches reports whether the NetworkPolicy peer p selects q (the policy
// lives in the release namespace).
func matches(t *testing.T, p networkingv1.NetworkPolicyPeer, q peer) bool {
	t.Helper()
	if p.IPBlock != nil {
		if q.ip == "" {
			return false
		}
		_, cidr, err := net.ParseCIDR(p.IPBlock.CIDR)
		require.NoError(t, err)
		return cidr.Contains(net.ParseIP(q.ip))
	}
	if q.ip != "" {
		return false
	}
	sel := func(s *metav1.LabelSelector, l map[string]string) bool {
		ls, err := metav1.LabelSelectorAsSelector(s)
		require.NoError(t, err)
		return ls.Matches(labels.Set(l))
	}
	if p.NamespaceSelector == nil && q.nsLabels["kubernetes.io/metadata.name"] != releaseNS {
		return false
	}
	if p.NamespaceSelector != nil && !sel(p.NamespaceSelector, q.nsLabels) {
		return false
	}
	return p.PodSelector == nil || sel(p.PodSelector, q.labels)
}

// allows reports whether np lets q connect in (ingress) or out to q
// (egress) on TCP or UDP port.
func allows(t *testing.T, np *networkingv1.NetworkPolicy, ingress bool, q peer, proto corev1.Protocol, port int32) bool {
	t.Helper()
	type rule struct {
		peers []networkingv1.NetworkPolicyPeer
		ports []networkingv1.NetworkPolicyPort
	}
	var rules []rule
	if ingress {
		for _, r := range np.Spec.Ingress {
			rules = append(rules, rule{r.From, r.Ports})
		}
	} else {
		for _, r := range np.Spec.Egress {
			rules = append(rules, rule{r.To, r.Ports})
		}
	}
	for _, r := range rules {
		peerOK := len(r.peers) == 0
		for _, p := range r.peers {
			peerOK = peerOK || matches(t, p, q)
		}
		portOK := len(r.ports) == 0
		for _, p := range r.ports {
			pp := corev1.ProtocolTCP
			if p.Protocol != nil {
				pp = *p.Protocol
			}
			portOK = portOK || pp == proto && p.Port != nil && p.Port.IntValue() == int(port)
		}
		if peerOK && portOK {
			return true
		}
	}
	return false
}

// TestChart_networkPoliciesLetEachComponentReachOnlyWhatItNeeds decides
// connections with the rendered NetworkPolicies, as a CNI would: the
// runner is reachable only by its callers and reaches only DNS, the state
// servers, the artifact server and what runner.egress adds.
func TestChart_networkPoliciesLetEachComponentReachOnlyWhatItNeeds(t *testing.T) {
	r := renderChart(t, `
runner:
  egress:
    - to: [{ipBlock: {cidr: 198.51.100.0/24}}]
      ports: [{port: 443, protocol: TCP}]
`)
	require.Empty(t, r.denies())
	provider := peer{name: "the provider endpoint of runner.egress", ip: "198.51.100.10"}
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	for _, np := range all[*networkingv1.NetworkPolicy](r) {
		assert.ElementsMatch(t, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, np.Spec.PolicyTypes, np.Name)
	}
	type conn struct {
		policy  string
		ingress bool
		peer    peer
		proto   corev1.Protocol
		port    int32
		want    bool
	}
	cases := []conn{
		// The runner: in from its callers only.
		{"sluice-runner", true, syncerPod, tcp, 8090, true},
		{"sluice-runner", true, operatorPod, tcp, 8090, true},
		{"sluice-runner", true, otherPod, tcp, 8090, false},
		{"sluice-runner", true, outside, tcp, 8090, false},
		{"sluice-runner", true, syncerPod, tcp, 8092, false},
		// The runner: out to DNS, the state servers, the artifact server, runner.egress.
		{"sluice-runner", false, kubeDNS, udp, 53, true},
		{"sluice-runner", false, kubeDNS, tcp, 53, true},
		{"sluice-runner", false, outside, udp, 53, false},
		{"sluice-runner", false, syncerPod, tcp, 8092, true},
		{"sluice-runner", false, operatorPod, tcp, 8092, true},
		{"sluice-runner", false, syncerPod, tcp, 9090, true},
		{"sluice-runner", false, provider, tcp, 443, true},
		{"sluice-runner", false, outside, tcp, 443, false}, // the API server, or anything else
		{"sluice-runner", false, outside, tcp, 6443, false},
		{"sluice-runner", false, metadataAPI, tcp, 80, false},
		{"sluice-runner", false, syncerPod, tcp, 9292, false},
		{"sluice-runner", false, syncerPod, tcp, 8080, false},
		{"sluice-runner", false, operatorPod, tcp, 8080, false},
		{"sluice-runner", false, otherPod, tcp, 443, false},
		{"sluice-runner", false, runnerPod, tcp, 8090, false},
		// The syncer: webhooks from anywhere, artifacts for the operator and the runner, state for the runner.
		{"sluice-syncer", true, outside, tcp, 9292, true},
		{"sluice-syncer", true, operatorPod, tcp, 9090, true},
		{"sluice-syncer", true, runnerPod, tcp, 9090, true},
		{"sluice-syncer", true, otherPod, tcp, 9090, false},
		{"sluice-syncer", true, runnerPod, tcp, 8092, true},
		{"sluice-syncer", true, operatorPod, tcp, 8092, false},
		{"sluice-syncer", true, otherPod, tcp, 8092, false},
		{"sluice-syncer", true, outside, tcp, 8080, true}, // metrics
		// The syncer: out to the API server, DNS, git, the runner.
		{"sluice-syncer", false, outside, tcp, 6443, true},
		{"sluice-syncer", false, outside, tcp, 443, true},
		{"sluice-syncer", false, outside, tcp, 22, true},
		{"sluice-syncer", false, kubeDNS, udp, 53, true},
		{"sluice-syncer", false, runnerPod, tcp, 8090, true},
		{"sluice-syncer", false, outside, tcp, 25, false},
		// The operator: state for the runner only, metrics.
		{"sluice-operator", true, runnerPod, tcp, 8092, true},
		{"sluice-operator", true, syncerPod, tcp, 8092, false},
		{"sluice-operator", true, otherPod, tcp, 8092, false},
		{"sluice-operator", true, outside, tcp, 8080, true},
		// The operator: out to the API server, DNS, the artifact server, the runner.
		{"sluice-operator", false, outside, tcp, 6443, true},
		{"sluice-operator", false, kubeDNS, udp, 53, true},
		{"sluice-operator", false, syncerPod, tcp, 9090, true},
		{"sluice-operator", false, runnerPod, tcp, 8090, true},
		{"sluice-operator", false, syncerPod, tcp, 8092, false},
		{"sluice-operator", false, outside, tcp, 22, false},
	}
	for _, c := range cases {
		dir := "out to"
		if c.ingress {
			dir = "in from"
		}
		verb := "allows"
		if !c.want {
			verb = "refuses"
		}
		t.Run(fmt.Sprintf("%s %s %s %s %s/%d", c.policy, verb, dir, c.peer.name, strings.ToLower(string(c.proto)), c.port), func(t *testing.T) {
			np := find[*networkingv1.NetworkPolicy](t, r, c.policy)
			assert.Equal(t, c.want, allows(t, np, c.ingress, c.peer, c.proto, c.port))
		})
	}

	// The API server may be pinned to its addresses.
	pinned := renderChart(t, "networkPolicy: {apiServer: {cidrs: [10.96.0.1/32], ports: [443]}}\n")
	require.Empty(t, pinned.denies())
	op := find[*networkingv1.NetworkPolicy](t, pinned, "sluice-operator")
	assert.True(t, allows(t, op, false, peer{name: "the API server", ip: "10.96.0.1"}, tcp, 443))
	assert.False(t, allows(t, op, false, outside, tcp, 443))

	// Off means off.
	none := renderChart(t, "networkPolicy: {enabled: false}\n")
	assert.Empty(t, all[*networkingv1.NetworkPolicy](none))
}

// grantsSecretRead reports whether a rule lets its subject read Secrets.
func grantsSecretRead(rule rbacv1.PolicyRule) bool {
	group := slices.Contains(rule.APIGroups, "") || slices.Contains(rule.APIGroups, "*")
	res := slices.Contains(rule.Resources, "secrets") || slices.Contains(rule.Resources, "*")
	read := slices.ContainsFunc(rule.Verbs, func(v string) bool { return v == "get" || v == "list" || v == "watch" || v == "*" })
	return group && res && read
}

// TestChart_syncerReadsNoSecretClusterWide: no ClusterRole bound to the
// syncer by a ClusterRoleBinding grants reading Secrets; Secrets are read
// through RoleBindings in the namespaces the syncer serves, with get only
// (no list or watch), and the commit status token by its name.
func TestChart_syncerReadsNoSecretClusterWide(t *testing.T) {
	for _, values := range []string{
		"",
		"syncer: {watchNamespaces: [team-a, team-b], statusProvider: {name: github, tokenSecret: gh-token}}\n",
	} {
		r := renderChart(t, values)
		require.Empty(t, r.denies())
		roles := map[string]*rbacv1.ClusterRole{}
		for _, cr := range all[*rbacv1.ClusterRole](r) {
			roles[cr.Name] = cr
		}
		for _, b := range all[*rbacv1.ClusterRoleBinding](r) {
			if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Name == syncerSA.Name }) {
				continue
			}
			role := roles[b.RoleRef.Name]
			require.NotNil(t, role, "ClusterRoleBinding %s binds a ClusterRole the chart does not render", b.Name)
			for _, rule := range role.Rules {
				assert.False(t, grantsSecretRead(rule), "ClusterRoleBinding %s grants the syncer %v on Secrets in every namespace", b.Name, rule.Verbs)
			}
		}
		var boundIn []string
		for _, b := range all[*rbacv1.RoleBinding](r) {
			if !slices.ContainsFunc(b.Subjects, func(s rbacv1.Subject) bool { return s.Name == syncerSA.Name }) {
				continue
			}
			var rules []rbacv1.PolicyRule
			if b.RoleRef.Kind == "ClusterRole" {
				rules = roles[b.RoleRef.Name].Rules
			} else {
				rules = find[*rbacv1.Role](t, r, b.RoleRef.Name).Rules
			}
			for _, rule := range rules {
				if !grantsSecretRead(rule) {
					continue
				}
				boundIn = append(boundIn, b.Namespace)
				assert.NotContains(t, rule.Verbs, "list", "RoleBinding %s/%s", b.Namespace, b.Name)
				assert.NotContains(t, rule.Verbs, "watch", "RoleBinding %s/%s", b.Namespace, b.Name)
				assert.NotContains(t, rule.Verbs, "*", "RoleBinding %s/%s", b.Namespace, b.Name)
				if b.Namespace == releaseNS {
					assert.Equal(t, []string{"gh-token"}, rule.ResourceNames, "in the release namespace, the status token only")
				}
			}
		}
		if values == "" {
			assert.Empty(t, boundIn, "without watchNamespaces the syncer reads no Secret")
		} else {
			assert.ElementsMatch(t, []string{"team-a", "team-b", releaseNS}, boundIn)
		}
	}
}
