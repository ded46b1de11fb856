package argocd

// An end-to-end test through the operator's manager (gate, apply lock,
// reconcilers) with this applier registered as cmd/operator registers it.

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestOperator_appliesThroughArgoCDAndFailsWhatArgoCDFails(t *testing.T) {
	f := newFixture(t, true)
	ctx := f.startOperator(5*time.Second, nil)
	// The Repository and the Release, as the syncer writes them.
	f.autoApprove(ctx)

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
