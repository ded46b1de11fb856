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
	require.NoError(t, (&Flags{Apply: true, Project: DefaultProject, Server: InClusterServer, Wait: 5 * time.Second}).Register(reg, env.Config, logr.Discard()))
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
	rel := f.release.DeepCopy()
	rel.UID = ""
	rel.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	require.NoError(t, env.Client.Create(ctx, rel))
	f.release = rel

	submit := func(cr *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
		cr.Labels = map[string]string{sluicev1.LabelRelease: rel.Name}
		cr.Spec.Artifact = sluicev1.ArtifactReference{URL: "http://sluice-syncer.sluice-system.svc/artifacts/x.tar.gz", SHA256: sluicev1.SHA256Digest([]byte("a"))}
		cr.Spec.ContentDigest = sluicev1.SHA256Digest([]byte("content " + cr.Spec.Revision))
		cr.Spec.Verdict = sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow}
		cr.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
		cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
		require.NoError(t, env.Client.Create(ctx, cr))
		return cr
	}

	first := submit(f.change())
	got, err := env.WaitChangePhase(ctx, client.ObjectKeyFromObject(first), sluicev1.PhaseApplied, 90*time.Second)
	require.NoError(t, err)
	require.Equal(t, Name, got.Status.Apply.Applier)
	require.Contains(t, got.Status.Apply.Message, "Healthy")
	require.Equal(t, first.Spec.Revision, f.application().Object["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"])

	// Argo CD fails the next sync: so does the change.
	bad := f.change()
	f.argo.set(bad.Spec.Revision, fail)
	submit(bad)
	got, err = env.WaitChangePhase(ctx, client.ObjectKeyFromObject(bad), sluicev1.PhaseFailed, 90*time.Second)
	require.NoError(t, err)
	require.Contains(t, got.Status.Apply.Message, "failed to apply")
}
