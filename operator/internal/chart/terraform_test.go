package chart_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/operator/api/testenv"
)

// TestChart_syncerPlansTerraformWithOnlyItsOwnRights runs real terraform
// plans against the kubernetes state backend in a control namespace as the
// syncer's ServiceAccount (its token; what the pod does without
// syncer.terraform.kubeconfigSecret): creating a workspace's state Secret,
// listing workspaces and taking and releasing the state lock Lease must all
// be within the chart's RBAC.
func TestChart_syncerPlansTerraformWithOnlyItsOwnRights(t *testing.T) {
	ctx := context.Background()
	stack := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(stack, "main.tf"), []byte(`
variable "env" {
  type = string
}

resource "terraform_data" "marker" {
  input = var.env
}
`), 0o644))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, testenv.WriteKubeconfig(syncerCfg, kubeconfig, ""))
	for _, ws := range []string{"staging", "staging", "default"} {
		res, err := terraform.Plan(ctx, terraform.PlanOptions{
			ExecOptions: terraform.ExecOptions{Env: map[string]string{"KUBE_CONFIG_PATH": kubeconfig}},
			Dir:         stack,
			Vars:        map[string]string{"env": ws},
			Workspace:   ws,
			Backend:     terraform.BackendKubernetes,
			Kubernetes:  &terraform.KubernetesBackend{Namespace: controlNS, SecretSuffix: "checkout-" + ws},
		})
		require.NoError(t, err, "plan in workspace %s as the syncer", ws)
		assert.NotEmpty(t, res.PlanFile)
	}
	secrets := &corev1.SecretList{}
	require.NoError(t, env.Client.List(ctx, secrets, client.InNamespace(controlNS), client.HasLabels{"tfstate"}))
	assert.NotEmpty(t, secrets.Items, "the staging workspace's state Secret was not created")
}
