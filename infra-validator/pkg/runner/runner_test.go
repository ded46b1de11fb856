package runner_test

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

func TestMain(m *testing.M) {
	runner.MaybeRunChild()
	os.Exit(m.Run())
}

// secret plants a credential of "the caller": a token file only this
// process may read and an environment variable.
func secret(t *testing.T) (path, value string) {
	t.Helper()
	value = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c3luY2VyIn0.c2lnbmF0dXJlLW9mLXRoZS1zeW5jZXI"
	path = filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte(value), 0o600))
	t.Setenv("SLUICE_TEST_CALLER_TOKEN", value)
	return path, value
}

func stack(t *testing.T, mainTF string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "stack")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.tf"), []byte(mainTF), 0o644))
	return dir
}

func requireNoSecret(t *testing.T, value string, texts ...string) {
	t.Helper()
	dashed := strings.ReplaceAll(value, ".", "-")
	for _, s := range texts {
		for _, v := range []string{value, dashed, value[:20], dashed[len(dashed)-20:]} {
			require.NotContains(t, s, v, "the caller's credential leaked")
		}
	}
}

// TestLocal_aPlanCannotReadItsCallersCredentials: a stack reads the
// caller's token file and /proc/self/environ through file() and an error
// message; the read is refused and nothing of the token comes back.
// With Spare, the second and third runs use a child started ahead of them.
func TestLocal_aPlanCannotReadItsCallersCredentials(t *testing.T) {
	for _, spare := range []bool{false, true} {
		t.Run(fmt.Sprintf("spare=%v", spare), func(t *testing.T) { planCannotReadCallersCredentials(t, &runner.Local{Spare: spare}) })
	}
}

func planCannotReadCallersCredentials(t *testing.T, local *runner.Local) {
	token, value := secret(t)
	defer local.Close()
	for name, expr := range map[string]string{
		"the token file":      fmt.Sprintf("file(%q)", token),
		"its own environment": `file("/proc/self/environ")`,
		"the parent's":        `file("/proc/${1}/environ")`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := stack(t, fmt.Sprintf("locals {\n  t = tonumber(replace(%s, \".\", \"-\"))\n}\noutput \"t\" {\n  value = local.t\n}\n", expr))
			_, err := terraform.Plan(context.Background(), terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: local}, Dir: dir})
			require.Error(t, err)
			var runErr *terraform.RunError
			require.ErrorAs(t, err, &runErr)
			t.Log(err)
			// What is shown withholds terraform's text; the approvers'
			// copy says the read was refused.
			require.Contains(t, fmt.Sprint(runErr.Details), "denied", "the read itself is refused")
			requireNoSecret(t, value, err.Error(), runErr.Stderr, fmt.Sprint(runErr.Diagnostics), fmt.Sprint(runErr.Details))
		})
	}
}

// TestLocal_plansAndAppliesWithAnEnvironmentBuiltFromNothing: a real
// plan and apply through the child; a provisioner that prints its whole
// environment finds none of the caller's, only what the run was given.
// With Spare, the apply runs in a child started ahead of it.
func TestLocal_plansAndAppliesWithAnEnvironmentBuiltFromNothing(t *testing.T) {
	for _, spare := range []bool{false, true} {
		t.Run(fmt.Sprintf("spare=%v", spare), func(t *testing.T) { plansAndAppliesWithAnEmptyEnvironment(t, &runner.Local{Spare: spare}) })
	}
}

func plansAndAppliesWithAnEmptyEnvironment(t *testing.T, local *runner.Local) {
	_, value := secret(t)
	defer local.Close()
	dir := stack(t, `terraform {
  backend "local" {}
}
variable "size" {
  type = string
}
resource "terraform_data" "db" {
  input = "db-${var.size}"
  provisioner "local-exec" {
    command = "env; cat /proc/$PPID/environ; echo; exit 3"
  }
}
`)
	ctx := context.Background()
	res, err := terraform.Plan(ctx, terraform.PlanOptions{
		ExecOptions: terraform.ExecOptions{Runner: local, Env: map[string]string{"SLUICE_PROVIDER_SETTING": "given-to-the-run"}},
		Dir:         dir, Vars: map[string]string{"size": "small"}, Backend: terraform.BackendOwn,
	})
	require.NoError(t, err)
	require.Equal(t, 1, res.Report.Counts.Create)

	_, err = terraform.Apply(ctx, terraform.ApplyOptions{
		ExecOptions: terraform.ExecOptions{Runner: local, Env: map[string]string{"SLUICE_PROVIDER_SETTING": "given-to-the-run"}},
		Dir:         dir, PlanFile: res.PlanFile, PlanFileSHA256: res.Report.PlanFileSHA256, Backend: terraform.BackendOwn,
	})
	var runErr *terraform.RunError
	require.ErrorAs(t, err, &runErr, "the provisioner fails on purpose, to show what it saw")
	t.Log(runErr.Stderr)
	require.Contains(t, runErr.Stderr, "SLUICE_PROVIDER_SETTING=[REDACTED]", "what the run was given reaches terraform, redacted on the way back")
	require.Contains(t, runErr.Stderr, "CHECKPOINT_DISABLE=1")
	require.NotContains(t, runErr.Stderr, "SLUICE_TEST_CALLER_TOKEN")
	require.Contains(t, runErr.Stderr, "Permission denied", "the parent's environment is out of reach")
	requireNoSecret(t, value, runErr.Stderr, err.Error())
}

// TestLocal_aChildKilledMidRunIsARunnerLost: no result means the run may
// have done anything: ErrRunnerLost.
func TestLocal_aChildKilledMidRunIsARunnerLost(t *testing.T) {
	local := &runner.Local{}
	local.SetStarted(func(pid int) { _ = syscall.Kill(pid, syscall.SIGKILL) })
	dir := stack(t, "resource \"terraform_data\" \"x\" {}\n")
	_, err := terraform.Plan(context.Background(), terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: local}, Dir: dir})
	require.ErrorIs(t, err, terraform.ErrRunnerLost)
}

// TestRemote_runsJobsForTheTokenHolderOnly: the runner workload's API.
func TestRemote_runsJobsForTheTokenHolderOnly(t *testing.T) {
	srv := &runner.Server{Token: "runner-token-0123456789", Local: &runner.Local{}}
	h, err := srv.Handler()
	require.NoError(t, err)
	ts := httptest.NewServer(h)
	defer ts.Close()
	dir := stack(t, "resource \"terraform_data\" \"x\" {\n  input = \"a\"\n}\n")

	good, err := runner.NewRemote(ts.URL, "runner-token-0123456789")
	require.NoError(t, err)
	res, err := terraform.Plan(context.Background(), terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: good}, Dir: dir})
	require.NoError(t, err)
	require.Equal(t, 1, res.Report.Counts.Create)

	bad, err := runner.NewRemote(ts.URL, "some-other-token-000000")
	require.NoError(t, err)
	_, err = terraform.Plan(context.Background(), terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: bad}, Dir: dir})
	require.ErrorContains(t, err, "refused the token")
	require.False(t, errors.Is(err, terraform.ErrRunnerLost))

	// A broken stack comes back as terraform's diagnostics.
	broken := stack(t, "resource \"terraform_data\" \"x\" {\n  bogus = 1\n}\n")
	_, err = terraform.Plan(context.Background(), terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: good}, Dir: broken})
	require.True(t, terraform.IsConfigurationError(err), "%v", err)
	require.ErrorContains(t, err, "Unsupported argument")
}
