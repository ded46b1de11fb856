package terraform

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

// reconcileErrors is controller-runtime's count of reconciles of a
// controller that returned an error (and went into error backoff).
func reconcileErrors(t *testing.T, name string) float64 {
	t.Helper()
	// Gather returns what it collected; a collector that reads the
	// cache fails until the manager's cache started.
	families, _ := ctrlmetrics.Registry.Gather()
	for _, mf := range families {
		if mf.GetName() != "controller_runtime_reconcile_errors_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == name {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The terraform binary the operator checked at start is gone when an
// approved change is applied (an image without it, a volume unmounted):
// no retry fixes that, an administrator does. The change is marked Stalled
// with the path that was looked for, and is not retried with backoff.
func TestOperator_aMissingTerraformBinaryStallsTheChangeWithThePath(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	f.release.Spec.Chart = sluicev1.ChartSource{Path: "charts/service"}
	next := &recorder{f: f}
	installed, err := exec.LookPath("terraform")
	require.NoError(t, err)
	bin := filepath.Join(t.TempDir(), "bin", "terraform")
	require.NoError(t, os.MkdirAll(filepath.Dir(bin), 0o755))
	require.NoError(t, os.Symlink(installed, bin))

	reg := applier.Registry{sluicev1.DeliveryHelm: next}
	ctx := t.Context()
	require.NoError(t, (&Flags{Apply: true, Path: bin, StateAddr: "127.0.0.1:0"}).Register(ctx, reg, env.Config, server.BaseURL(), logr.Discard()))
	require.NoError(t, os.Remove(bin), "the binary goes after the start-up check")
	mgr, err := controller.NewManager(ctx, env.Config, controller.ManagerOptions{
		Options:     controller.Options{Appliers: reg, LockRetryInterval: time.Second, SkipNameValidation: true},
		MetricsAddr: "0", ProbeAddr: "0", PprofAddr: "0",
		Namespaces: []string{f.ctl},
	})
	require.NoError(t, err)
	testenv.Go(t, mgr).FailOnError(t)
	errorsBefore := reconcileErrors(t, "changerequest")

	cr := f.change("small")
	cr.Spec.ManifestDigest = sluicev1.SHA256Digest([]byte("manifests of " + cr.Name))
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	cr = f.submit(t, cr)
	got := &sluicev1.ChangeRequest{}
	require.Eventually(t, func() bool {
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cr), got))
		return meta.IsStatusConditionTrue(got.Status.Conditions, sluicev1.ConditionStalled)
	}, 90*time.Second, 100*time.Millisecond, "never Stalled")

	stalled := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionStalled)
	require.Equal(t, sluicev1.ReasonBinaryNotFound, stalled.Reason)
	require.Contains(t, stalled.Message, bin, "names the path it looked for")
	ready := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionReady)
	require.Equal(t, sluicev1.ReasonBinaryNotFound, ready.Reason)
	require.Equal(t, sluicev1.PhaseApplying, got.Status.Phase, "approved and handed over: neither failed nor applied")
	require.Equal(t, got.Generation, got.Status.ObservedGeneration)
	calls, _ := next.seen()
	require.Zero(t, calls, "the manifests never go without their infrastructure")
	require.Equal(t, errorsBefore, reconcileErrors(t, "changerequest"), "a stall is not retried with error backoff")
}
