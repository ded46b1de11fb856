package tfstate_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	tfrun "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
)

// TestRunner_aRunsCredentialAndProcessesEndWithIt is the attack of a
// provisioner that starts a background process in a session of its own to
// write the state later with the run's credential: after a successful
// plan and apply through the runner, the plan's and the apply's
// credentials are refused by the state server, and the process is gone.
func TestRunner_aRunsCredentialAndProcessesEndWithIt(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	g := tfstate.Grant{Namespace: ns, Release: "queue-prod"}
	word := "sluice-attack-" + randomHex(t)
	dir := t.TempDir()
	main := httpBackend + fmt.Sprintf(`
resource "terraform_data" "queue" {
  input = "q"
  provisioner "local-exec" {
    interpreter = ["/bin/bash", "-c"]
    command     = %q
  }
}
`, fmt.Sprintf(`setsid bash -c ': %s; touch started; while :; do sleep 1; done' </dev/null >/dev/null 2>&1 & while [ ! -f started ]; do sleep 0.05; done`, word))
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	local := &runner.Local{}
	ctx := context.Background()

	g.Mode = tfstate.ModePlan
	planCred := tfstatetest.Grant(t, s.Server, g)
	res, err := tfrun.Plan(ctx, tfrun.PlanOptions{
		ExecOptions: tfrun.ExecOptions{Runner: local, Env: planCred.Env(), Secrets: planCred.Secrets()},
		Dir:         dir, Backend: tfrun.BackendHTTP,
	})
	if err != nil {
		t.Fatal(err)
	}
	g.Mode = tfstate.ModeApply
	applyCred := tfstatetest.Grant(t, s.Server, g)
	if _, err := tfrun.Apply(ctx, tfrun.ApplyOptions{
		ExecOptions: tfrun.ExecOptions{Runner: local, Env: applyCred.Env(), Secrets: applyCred.Secrets()},
		Dir:         dir, PlanFile: res.PlanFile, PlanFileSHA256: res.Report.PlanFileSHA256, Backend: tfrun.BackendHTTP,
	}); err != nil {
		t.Fatal(err)
	}

	if pids := tfstatetest.ProcessesWith(t, word); len(pids) > 0 {
		t.Errorf("the provisioner's background process %v outlived the apply", pids)
	}
	for name, cred := range map[string]tfstate.Credential{"plan": planCred, "apply": applyCred} {
		if code, b := do(t, http.MethodGet, cred.Address, &cred, nil); code != http.StatusUnauthorized {
			t.Errorf("GET with the %s run's credential after the run: %d %s, want 401", name, code, b)
		}
		if code, b := do(t, "LOCK", cred.LockAddress, &cred, lockBody("late-lock")); code != http.StatusUnauthorized {
			t.Errorf("LOCK with the %s run's credential after the run: %d %s, want 401", name, code, b)
		}
	}
	// Another run's credential still works.
	next := tfstatetest.Grant(t, s.Server, g)
	if code, b := do(t, http.MethodGet, next.Address, &next, nil); code != http.StatusOK {
		t.Fatalf("GET with a new credential: %d %s, want 200", code, b)
	}
}

func randomHex(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
