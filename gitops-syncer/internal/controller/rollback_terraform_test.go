package controller_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The stack of the Terraform rollback tests: v1 is one queue; v2 changes
// its input (an update in place) or adds a second resource.
const (
	queueTF = "resource \"terraform_data\" \"queue\" {\n  input = var.env\n}\n"
	extraTF = "resource \"terraform_data\" \"extra\" {\n  input = \"x\"\n}\n"
)

// appliedState stores, as the release's Terraform state, what the real
// terraform leaves after applying mainTF with env: the state Secret of the
// kubernetes backend that the state server reads (tfstate-default-<release>
// in the control namespace, gzip).
func appliedState(t *testing.T, ns, release, mainTF, env string) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(envVariable+mainTF), 0o600))
	for _, args := range [][]string{{"init", "-input=false"}, {"apply", "-auto-approve", "-input=false", "-var", "env=" + env}} {
		cmd := exec.Command("terraform", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1", "CHECKPOINT_DISABLE=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "terraform %v: %s", args, out)
	}
	state, err := os.ReadFile(filepath.Join(dir, "terraform.tfstate"))
	require.NoError(t, err)
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	_, err = w.Write(state)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "tfstate-default-" + release, Namespace: ns,
		Labels:      map[string]string{"tfstate": "true", "tfstateSecretSuffix": release, "tfstateWorkspace": "default", "app.kubernetes.io/managed-by": "terraform"},
		Annotations: map[string]string{"encoding": "gzip"}},
		Data: map[string][]byte{"tfstate": gz.Bytes()}}
	existing := &corev1.Secret{}
	if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(sec), existing); err == nil {
		existing.Data = sec.Data
		require.NoError(t, k8s.Update(context.Background(), existing))
		return
	}
	require.NoError(t, k8s.Create(context.Background(), sec))
}

// tfVerifiedThenFailed syncs v1 of stack-staging (applied, its state
// stored, Verified), then v2 (mainTF2 with env2: applied, its state
// stored, VerificationFailed), and returns both changes.
func tfVerifiedThenFailed(t *testing.T, ns string, fixture *gittest.Repo, repo *sluicev1.Repository, mainTF2, vars2, env2 string) (v1, v2 sluicev1.ChangeRequest) {
	t.Helper()
	first := fixture.Head("main")
	waitHandled(t, repo, requestReconcile(t, repo))
	v1 = changeRequests(t, ns)[sluicev1.ChangeRequestName("stack-staging", first, 1)]
	require.NotEmpty(t, v1.Name)
	require.NotNil(t, v1.Spec.PlanSummary, "v1 is planned: %+v", v1.Spec.Verdict)
	markAppliedIn(t, ns, v1, "stack-staging")
	appliedState(t, ns, "stack-staging", queueTF, "staging")
	setPhase(t, &v1, sluicev1.PhaseVerified)

	fixture.WriteFile("services/stack/terraform/main.tf", envVariable+mainTF2)
	svc := readFixture(t, fixture, "services/stack/service.yaml")
	require.Contains(t, svc, "terraform: {vars: {env: staging}}")
	fixture.WriteFile("services/stack/service.yaml", strings.Replace(svc, "terraform: {vars: {env: staging}}", "terraform: {vars: "+vars2+"}", 1))
	second := fixture.Commit("stack v2", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	v2 = changeRequests(t, ns)[sluicev1.ChangeRequestName("stack-staging", second, 1)]
	require.NotEmpty(t, v2.Name)
	markAppliedIn(t, ns, v2, "stack-staging")
	appliedState(t, ns, "stack-staging", mainTF2, env2)
	setPhase(t, &v2, sluicev1.PhaseVerificationFailed)
	return v1, v2
}

// A Terraform rollback is a fresh plan from the state v2 left back to the
// verified configuration, shown and rated like any plan (its own plan
// digest, here one update in place); one whose fresh plan destroys what v2
// created is declined, a person decides, and the reason says what it
// would destroy. Both with the real terraform and the state server.
func TestRollback_terraformIsAFreshPlanAndADestroyWaitsForAPerson(t *testing.T) {
	for _, c := range []struct {
		name          string
		mainTF2, vars string
		env2          string
		declined      string
	}{
		{name: "an update in place", mainTF2: queueTF, vars: "{env: production}", env2: "production"},
		{name: "a destroy", mainTF2: queueTF + extraTF, vars: "{env: staging}", env2: "staging", declined: "destroys 1 and replaces 0 resource(s)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := newNamespace(t)
			fixture := terraformRepo(t, envVariable+queueTF, "{env: staging}")
			startSyncer(t, ns, "")
			repo := newRepository(t, ns, "infra", fixture.FileURL())
			v1, v2 := tfVerifiedThenFailed(t, ns, fixture, repo, c.mainTF2, c.vars, c.env2)

			askRollback(t, ns, "stack-staging", v2.Name, v1.Name)
			if c.declined != "" {
				cond := waitRolledBack(t, ns, "stack-staging")
				require.Equal(t, sluicev1.ReasonRollbackDeclined, cond.Reason)
				require.Contains(t, cond.Message, c.declined)
				for _, cr := range changeRequests(t, ns) {
					require.Nil(t, cr.Spec.Rollback, "a declined rollback created %s", cr.Name)
				}
				return
			}
			name := sluicev1.RollbackChangeRequestName("stack-staging", v2.Name, 1)
			var rb sluicev1.ChangeRequest
			require.Eventually(t, func() bool {
				var ok bool
				rb, ok = changeRequests(t, ns)[name]
				return ok
			}, 2*time.Minute, 50*time.Millisecond, "no rollback ChangeRequest %s", name)
			require.Equal(t, v1.Spec.Revision, rb.Spec.Revision)
			require.NotNil(t, rb.Spec.PlanSummary, "the rollback carries its plan")
			require.NotEmpty(t, rb.Spec.PlanDigest)
			require.NotEqual(t, v1.Spec.PlanDigest, rb.Spec.PlanDigest, "a fresh plan from the state v2 left, not v1's plan")
			require.Equal(t, sluicev1.PlanSummary{Change: 1}, *rb.Spec.PlanSummary, "one update in place back to the verified input")
			require.Equal(t, rb.ExpectedApprovalDigest(), rb.Spec.ApprovalDigest)
		})
	}
}
