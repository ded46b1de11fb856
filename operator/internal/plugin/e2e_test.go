package plugin_test

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/admission"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
	"github.com/sluice-gitops/sluice/operator/internal/plugin"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

// startOperator runs the operator's reconcilers as the operator's
// ServiceAccount (so every write it makes passes the admission policies)
// with the test applier for helm delivery, watching namespace ns.
func startOperator(t *testing.T, ns string) *testapplier.Applier {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-operator-e2e"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: params.Operator.Namespace, Name: params.Operator.Name}},
	}))
	require.NoError(t, env.WaitAllowed(ctx, authorizationv1.SubjectAccessReviewSpec{
		User: admission.ServiceAccountUsername(params.Operator),
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Verb: "update", Group: sluicev1.GroupVersion.Group, Resource: "changerequests", Subresource: "status"},
	}))
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: admission.ServiceAccountUsername(params.Operator),
		Groups:   admission.ServiceAccountGroups(params.Operator),
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 env.Scheme,
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	require.NoError(t, err)
	direct, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	ta := &testapplier.Applier{Client: direct}
	require.NoError(t, controller.Setup(ctx, mgr, controller.Options{
		Appliers:          applier.Registry{sluicev1.DeliveryHelm: ta},
		LockRetryInterval: time.Second,
	}))
	testenv.Go(t, mgr).FailOnError(t)
	return ta
}

// The whole path as a user sees it, with the real operator under the real
// admission policies: the change waits at the gate, describe says who must
// approve, carol approves with the plugin, and wait returns once the
// operator has applied it.
func TestEndToEnd_approveWithThePluginAndWaitForTheOperator(t *testing.T) {
	ctx := context.Background()
	ns := "team-e2e"
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	require.NoError(t, env.Client.Create(ctx, &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ns},
		Spec: sluicev1.RepositorySpec{
			URL: "https://git.example.com/platform/infra.git", TargetNamespaces: []string{"*"}, ServiceAccountName: "deployer",
		},
	}))
	ta := startOperator(t, ns)

	rule := sluicev1.ApprovalRule{Required: 1, Approvers: []sluicev1.Identity{"k8s-group:sre"}}
	cr := newChange(t, ns, "prod", rule, "email:dev@example.com")

	phase := func() sluicev1.ChangeRequestPhase {
		var live sluicev1.ChangeRequest
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cr), &live))
		return live.Status.Phase
	}
	require.Eventually(t, func() bool { return phase() == sluicev1.PhaseAwaitingApproval }, time.Minute, 100*time.Millisecond)

	out, _, err := sluice(t, "describe", cr.Name, "-n", ns)
	require.NoError(t, err)
	require.Contains(t, out, "Still needed:       1 more approval from any of k8s-group:sre")

	out, _, err = sluice(t, "get", cr.Name, "-n", ns)
	require.NoError(t, err)
	require.Regexp(t, cr.Name+`\s+\S+\s+Apply\s+AwaitingApproval\s+medium\s+0/1\s`, out)

	type result struct {
		out string
		err error
	}
	waited := make(chan result, 1)
	go func() {
		var o, e bytes.Buffer
		err := plugin.Run(context.Background(), []string{"wait", cr.Name, "-n", ns, "--for", "applied", "--timeout", "2m"}, &o, &e, carolCfg)
		waited <- result{o.String(), err}
	}()

	out, _, err = sluice(t, "approve", cr.Name, "-n", ns, "--comment", "ship it")
	require.NoError(t, err)
	require.Contains(t, out, "k8s:carol approved change "+cr.Name)

	r := <-waited
	require.NoError(t, r.err)
	require.Contains(t, r.out, "condition met: applied (phase Applied)")
	require.Equal(t, 1, ta.Calls(cr.Name), "applied exactly once")

	out, _, err = sluice(t, "describe", cr.Name, "-n", ns)
	require.NoError(t, err)
	require.Contains(t, out, "Still needed:       nobody: the change is Applied")
	require.Regexp(t, `k8s:carol\s+approve\s+kubernetes\s+counts`, out)
	require.Regexp(t, `Applied\s+True`, out)
}
