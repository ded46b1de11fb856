package drift_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/operator/internal/drift"
	"github.com/sluice-gitops/sluice/operator/internal/plugin"
)

func auditNS(t *testing.T, ns string) (plugin.Attestation, error) {
	t.Helper()
	env, _ := drift.SharedEnv()
	var out, errOut bytes.Buffer
	err := plugin.Run(context.Background(), []string{"audit", "-n", ns, "-o", "json"}, &out, &errOut, env.Config)
	var ats []plugin.Attestation
	require.NoError(t, json.Unmarshal(out.Bytes(), &ats), out.String()+errOut.String())
	require.Len(t, ats, 1)
	return ats[0], err
}

func TestAudit_flagsATerraformStateChangedByAnotherRun(t *testing.T) {
	f := drift.NewTerraformFixture(t)
	f.MarkApplied()
	require.Equal(t, metav1.ConditionFalse, f.CheckDrift())

	at, err := auditNS(t, f.Namespace())
	require.Error(t, err, "a Terraform release is never proven: the apply records no state serial")
	require.Equal(t, plugin.AuditUnknown, at.Result, at.Evidence)
	ev := strings.Join(at.Evidence, "; ")
	require.Contains(t, ev, "Terraform state lineage")
	require.Contains(t, ev, "last plan found no change")

	// A second terraform run changes the resource's input in the state.
	f.RunTerraform("large")
	require.Equal(t, metav1.ConditionTrue, f.CheckDrift())
	at, err = auditNS(t, f.Namespace())
	require.Error(t, err)
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), "terraform terraform_data.db changed (input, output)")

	// The state Secret deleted behind Sluice's back.
	env, _ := drift.SharedEnv()
	require.NoError(t, env.Client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tfstate-default-db-staging", Namespace: f.Namespace()}}))
	at, err = auditNS(t, f.Namespace())
	require.Error(t, err)
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), "tfstate-default-db-staging is gone")
}
