package chart_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
)

// TestChart_stateServersWorkWithOnlyTheChartsRights runs a real terraform
// plan through a state server acting as the syncer's ServiceAccount and
// applies the plan file through one acting as the operator's, twice, in
// the control namespace: reading the state, taking and releasing the lock
// Lease and writing the state must all be within the rights the chart
// binds there (Secrets get for the syncer, with no list or watch).
func TestChart_stateServersWorkWithOnlyTheChartsRights(t *testing.T) {
	ctx := context.Background()
	// Each acts with a token of its component's ServiceAccount, so only
	// the chart's RBAC applies.
	syncerState, operatorState := tfstatetest.New(t, syncerCfg, tfstate.Options{}), tfstatetest.New(t, operatorCfg, tfstate.Options{})
	stack := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(stack, "main.tf"), []byte(`
variable "env" {
  type = string
}

resource "terraform_data" "marker" {
  input = var.env
}
`), 0o644))
	grant := tfstate.Grant{Namespace: controlNS, Release: "checkout-staging"}
	for _, env := range []string{"one", "two"} {
		grant.Mode = tfstate.ModePlan
		planCred := tfstatetest.Grant(t, syncerState, grant)
		res, err := terraform.Plan(ctx, terraform.PlanOptions{
			ExecOptions: terraform.ExecOptions{Env: planCred.Env(), Secrets: planCred.Secrets()},
			Dir:         stack,
			Vars:        map[string]string{"env": env},
			Backend:     terraform.BackendHTTP,
		})
		require.NoError(t, err, "plan through the syncer's state server")
		require.NotEmpty(t, res.PlanFile)

		grant.Mode = tfstate.ModeApply
		applyCred := tfstatetest.Grant(t, operatorState, grant)
		sum := sha256.Sum256(res.PlanFile)
		_, err = terraform.Apply(ctx, terraform.ApplyOptions{
			ExecOptions:    terraform.ExecOptions{Env: applyCred.Env(), Secrets: applyCred.Secrets()},
			Dir:            stack,
			PlanFile:       res.PlanFile,
			PlanFileSHA256: "sha256:" + hex.EncodeToString(sum[:]),
			Backend:        terraform.BackendHTTP,
		})
		require.NoError(t, err, "apply through the operator's state server")
	}
	state := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: "tfstate-default-checkout-staging"}, state))
	assert.Equal(t, "true", state.Labels["tfstate"])

	// The same servers cannot reach a namespace the chart did not bind.
	const elsewhere = "not-served"
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: elsewhere}})))
	cred := tfstatetest.Grant(t, syncerState, tfstate.Grant{Namespace: elsewhere, Release: "checkout-staging", Mode: tfstate.ModePlan})
	_, err := terraform.Plan(ctx, terraform.PlanOptions{
		ExecOptions: terraform.ExecOptions{Env: cred.Env(), Secrets: cred.Secrets()},
		Dir:         stack,
		Vars:        map[string]string{"env": "three"},
		Backend:     terraform.BackendHTTP,
	})
	require.Error(t, err, "the syncer's state server read state in a namespace it does not serve")
}
