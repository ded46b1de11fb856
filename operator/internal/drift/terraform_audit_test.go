package drift_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// editState rewrites the release's stored state (the kubernetes backend's
// gzipped JSON) the way someone with write access to the Secret could.
func editState(t *testing.T, ns, name string, edit func(st map[string]any)) {
	t.Helper()
	env, _ := drift.SharedEnv()
	ctx := context.Background()
	s := &corev1.Secret{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s))
	zr, err := gzip.NewReader(bytes.NewReader(s.Data["tfstate"]))
	require.NoError(t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(t, err)
	var st map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&st))
	edit(st)
	raw, err = json.Marshal(st)
	require.NoError(t, err)
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write(raw)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	s.Data["tfstate"] = gz.Bytes()
	require.NoError(t, env.Client.Update(ctx, s))
}

// dbInput sets the input and output of terraform_data.db in a state.
func dbInput(st map[string]any, value string) {
	for _, r := range st["resources"].([]any) {
		res := r.(map[string]any)
		if res["name"] != "db" {
			continue
		}
		attrs := res["instances"].([]any)[0].(map[string]any)["attributes"].(map[string]any)
		attrs["input"] = map[string]any{"value": value, "type": "string"}
		attrs["output"] = map[string]any{"value": value, "type": "string"}
	}
}

// TestAudit_provesATerraformReleaseByTheStateItsApplyLeft: the apply
// records the state it left; audit proves the release from the state
// Secret alone while it holds those resources, and flags a state changed
// behind Sluice's back: rewritten with the apply's serial kept, changed by
// a second terraform run, deleted.
func TestAudit_provesATerraformReleaseByTheStateItsApplyLeft(t *testing.T) {
	f := drift.NewTerraformFixture(t)
	f.MarkApplied()
	require.Equal(t, metav1.ConditionFalse, f.CheckDrift())
	recorded := f.Applied().Status.Apply.Terraform
	require.NotNil(t, recorded, "the apply records the state it left")
	require.Equal(t, int32(1), recorded.Resources)

	at, err := auditNS(t, f.Namespace())
	require.NoError(t, err, at.Evidence)
	require.Equal(t, plugin.AuditProven, at.Result, at.Evidence)
	require.Equal(t, recorded, at.TerraformState)
	require.NotEmpty(t, at.PolicyBundleDigest)
	require.Equal(t, string(f.Applied().Spec.PolicyBundleDigest), at.PolicyBundleDigest, "the attestation names the policy bundle of the verdict")
	require.Contains(t, strings.Join(at.Evidence, "; "), "the state is the one the apply of "+at.Change+" left")

	// Written again (a higher serial) with the same resources: still what
	// the apply left.
	editState(t, f.Namespace(), f.StateSecret(), func(st map[string]any) { st["serial"] = recorded.Serial + 5 })
	at, err = auditNS(t, f.Namespace())
	require.NoError(t, err, at.Evidence)
	require.Equal(t, plugin.AuditProven, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), "holds exactly the resources it left")

	// Rewritten by hand with the apply's serial kept and another input:
	// the serial alone would pass it; the resources digest does not.
	editState(t, f.Namespace(), f.StateSecret(), func(st map[string]any) {
		st["serial"] = recorded.Serial
		dbInput(st, "db-huge")
	})
	at, err = auditNS(t, f.Namespace())
	require.Error(t, err)
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), "rewritten behind Sluice's back")

	// Put back, then a second terraform run changes the input in the state.
	editState(t, f.Namespace(), f.StateSecret(), func(st map[string]any) { dbInput(st, "db-small") })
	at, err = auditNS(t, f.Namespace())
	require.NoError(t, err, at.Evidence)
	f.RunTerraform("large")
	at, err = auditNS(t, f.Namespace())
	require.Error(t, err)
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), "its resources differ")
	require.Equal(t, metav1.ConditionTrue, f.CheckDrift())
	at, _ = auditNS(t, f.Namespace())
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), "terraform terraform_data.db changed (input, output)")

	// The state Secret deleted behind Sluice's back.
	env, _ := drift.SharedEnv()
	require.NoError(t, env.Client.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: f.StateSecret(), Namespace: f.Namespace()}}))
	at, err = auditNS(t, f.Namespace())
	require.Error(t, err)
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), f.StateSecret()+" is gone")
}
