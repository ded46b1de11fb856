package argocd

// An end-to-end test through the operator's manager (gate, apply lock,
// reconcilers) with this applier registered as cmd/operator registers it.

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

func TestOperator_appliesThroughArgoCDAndFailsWhatArgoCDFails(t *testing.T) {
	f := newFixture(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	reg := applier.Registry{}
	require.NoError(t, (&Flags{Apply: true, Namespace: argo.Namespace, Server: InClusterServer, Wait: 5 * time.Second,
		ArtifactBaseURL: server.BaseURL()}).Register(reg, env.Config, logr.Discard()))
	mgr, err := controller.NewManager(ctx, env.Config, controller.ManagerOptions{
		Options:     controller.Options{Appliers: reg, LockRetryInterval: time.Second, SkipNameValidation: true},
		MetricsAddr: "0", ProbeAddr: "0", PprofAddr: "0",
		Namespaces: []string{f.ctl},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	// The Repository and the Release, as the syncer writes them.
	repo := f.repo.DeepCopy()
	require.NoError(t, env.Client.Create(ctx, repo))
	rel := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel))
	rel.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	require.NoError(t, env.Client.Update(ctx, rel))

	// The operator takes the lock, the plugin reads it, Argo CD syncs.
	first := f.change("message: approved\n", nil)
	got, err := env.WaitChangePhase(ctx, client.ObjectKeyFromObject(first), sluicev1.PhaseApplied, 120*time.Second)
	require.NoError(t, err, argo.Logs())
	require.Equal(t, Name, got.Status.Apply.Applier)
	require.Contains(t, got.Status.Apply.Message, "Healthy")
	require.Equal(t, "approved", f.message())

	// Argo CD fails the next sync: so does the change, with its message.
	bad := f.change("message: approved\nbadObject: true\n", nil)
	got, err = env.WaitChangePhase(ctx, client.ObjectKeyFromObject(bad), sluicev1.PhaseFailed, 120*time.Second)
	require.NoError(t, err, argo.Logs())
	require.Contains(t, got.Status.Apply.Message, "Not_A_Valid_Name")
	require.Equal(t, "approved", f.message())
}
