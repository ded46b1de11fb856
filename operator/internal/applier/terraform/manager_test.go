package terraform

// An end-to-end test through the operator's manager (gate, apply lock,
// reconcilers), with the appliers registered as cmd/operator registers
// them: the Terraform applier in front of the delivery applier.

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

// startManager runs the operator's manager for f.ctl until the test ends,
// with next as the helm delivery's applier behind Terraform.
func startManager(t *testing.T, f *fixture, next applier.Applier) {
	t.Helper()
	reg := applier.Registry{sluicev1.DeliveryHelm: next}
	tfFlags := Flags{Apply: true, StateAddr: "127.0.0.1:0"}
	ctx := t.Context()
	require.NoError(t, tfFlags.Register(ctx, reg, env.Config, server.BaseURL(), logr.Discard()))
	mgr, err := controller.NewManager(ctx, env.Config, controller.ManagerOptions{
		Options:     controller.Options{Appliers: reg, LockRetryInterval: time.Second, SkipNameValidation: true},
		MetricsAddr: "0", ProbeAddr: "0", PprofAddr: "0",
		Namespaces: []string{f.ctl},
	})
	require.NoError(t, err)
	testenv.Go(t, mgr).FailOnError(t)
}

// submit creates the Repository and Release once, then an auto-approvable
// ChangeRequest, in the API server.
func (f *fixture) submit(t *testing.T, cr *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	t.Helper()
	ctx := context.Background()
	if f.repo.ResourceVersion == "" {
		repo := f.repo.DeepCopy()
		require.NoError(t, env.Client.Create(ctx, repo))
		f.repo = repo
		rel := f.release.DeepCopy()
		rel.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
		require.NoError(t, env.Client.Create(ctx, rel))
		f.release = rel
	}
	cr = cr.DeepCopy()
	cr.UID = ""
	cr.Labels = map[string]string{sluicev1.LabelRelease: f.release.Name}
	cr.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	require.NoError(t, env.Client.Create(ctx, cr))
	return cr
}

func waitPhase(t *testing.T, cr *sluicev1.ChangeRequest, want sluicev1.ChangeRequestPhase) *sluicev1.ChangeRequest {
	t.Helper()
	got, err := env.WaitChangePhase(context.Background(), client.ObjectKeyFromObject(cr), want, 90*time.Second)
	require.NoError(t, err)
	return got
}

func TestOperator_appliesThePlanThenTheManifestsAndFailsAStalePlan(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.release.Spec.Chart = sluicev1.ChartSource{Path: "charts/service"}
	next := &recorder{f: f}
	startManager(t, f, next)

	withManifests := func(cr *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
		cr.Spec.ManifestDigest = sluicev1.SHA256Digest([]byte("manifests of " + cr.Name))
		cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
		return cr
	}
	first := withManifests(f.change("small"))
	stale := withManifests(f.change("large")) // planned from the same state

	got := waitPhase(t, f.submit(t, first), sluicev1.PhaseApplied)
	require.Equal(t, "db-small", f.stateOutput())
	calls, state := next.seen()
	require.Equal(t, 1, calls)
	require.Equal(t, "db-small", state, "the manifests went after the infrastructure")
	require.Contains(t, got.Status.Apply.Message, "terraform applied plan")
	// The state the apply left is recorded on the change, as audit
	// recomputes it from the state Secret.
	var st corev1.Secret
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: StateSecretName("default", f.release.Name)}, &st))
	stored, err := StoredState(st.Data["tfstate"])
	require.NoError(t, err)
	require.Equal(t, &sluicev1.TerraformApplyResult{Lineage: stored.Lineage, Serial: int64(stored.Serial), ResourcesDigest: sluicev1.Digest(stored.ResourcesDigest), Resources: 1},
		got.Status.Apply.Terraform)

	got = waitPhase(t, f.submit(t, stale), sluicev1.PhaseFailed)
	require.Contains(t, got.Status.Apply.Message, sluicev1.ReasonStalePlan)
	require.Equal(t, "db-small", f.stateOutput(), "a stale plan applies nothing")
	calls, _ = next.seen()
	require.Equal(t, 1, calls, "nor its manifests")
}
