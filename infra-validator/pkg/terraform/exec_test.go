package terraform

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// terraformPath finds the installed terraform; these tests run the real
// binary (only the built-in terraform_data resource, which works offline).
func terraformPath(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatalf("these tests need terraform on PATH: %v", err)
	}
	return p
}

// copyStacks copies testdata/stacks into a temp dir, so Plan can write its
// override file, and returns the copy's path.
func copyStacks(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	src := filepath.Join("testdata", "stacks")
	err := filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if fi.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func plan(t *testing.T, opts PlanOptions) *PlanResult {
	t.Helper()
	if opts.ExecPath == "" {
		opts.ExecPath = terraformPath(t)
	}
	res, err := Plan(context.Background(), opts)
	if err != nil {
		t.Fatalf("Plan %s: %v", filepath.Base(opts.Dir), err)
	}
	return res
}

func TestPlan_sameStackFromTwoFoldersInAnotherOrderGivesOnePlanDigest(t *testing.T) {
	stacks := copyStacks(t)
	ordered := plan(t, PlanOptions{Dir: filepath.Join(stacks, "ordered")})
	reordered := plan(t, PlanOptions{Dir: filepath.Join(stacks, "reordered")})
	changed := plan(t, PlanOptions{Dir: filepath.Join(stacks, "changed")})

	if ordered.Report.PlanDigest != reordered.Report.PlanDigest {
		t.Errorf("same effect, different digests:\n ordered   %s\n reordered %s", ordered.Report.PlanDigest, reordered.Report.PlanDigest)
	}
	if changed.Report.PlanDigest == ordered.Report.PlanDigest {
		t.Error("a one-value change (size 10 → 11) kept the digest")
	}
	// A different variable value is a different effect too.
	prod := plan(t, PlanOptions{Dir: filepath.Join(stacks, "ordered"), Vars: map[string]string{"env": "prod"}})
	if prod.Report.PlanDigest == ordered.Report.PlanDigest {
		t.Error("env=prod kept the digest")
	}

	r := ordered.Report
	if want := (Counts{Create: 4}); r.Counts != want {
		t.Errorf("counts %+v, want %+v", r.Counts, want)
	}
	if r.Risk != report.RiskMedium || r.FormatVersion == "" || r.TerraformVersion == "" {
		t.Errorf("report: risk %s format %q terraform %q", r.Risk, r.FormatVersion, r.TerraformVersion)
	}
	if len(ordered.PlanFile) == 0 || r.PlanFileSHA256 != PlanFileSHA256(ordered.PlanFile) {
		t.Errorf("plan file sha256 %q does not match the returned file", r.PlanFileSHA256)
	}
	if !strings.Contains(string(ordered.PlanJSON), `"format_version"`) || ordered.Plan == nil {
		t.Error("the plan JSON or parsed plan is missing")
	}
	// The stack folder is left as it was.
	if _, err := os.Stat(filepath.Join(stacks, "ordered", BackendOverrideFile)); !errors.Is(err, os.ErrNotExist) {
		t.Error("the backend override file was left behind")
	}
	if _, err := os.Stat(filepath.Join(stacks, "ordered", ".terraform")); !errors.Is(err, os.ErrNotExist) {
		t.Error("terraform wrote .terraform into the stack folder")
	}
}

func TestPlan_workspaceAndDestroy(t *testing.T) {
	stacks := copyStacks(t)
	res := plan(t, PlanOptions{Dir: filepath.Join(stacks, "ordered"), Workspace: "staging", Destroy: true})
	// Against an empty state a destroy plan has nothing to do.
	if res.Report.Counts != (Counts{}) || res.Report.Risk != report.RiskLow {
		t.Errorf("destroy of nothing: %+v %s", res.Report.Counts, res.Report.Risk)
	}
}

func TestShowPlanFile_readsTheSamePlanBack(t *testing.T) {
	stacks := copyStacks(t)
	dir := filepath.Join(stacks, "ordered")
	dataDir := t.TempDir()
	res := plan(t, PlanOptions{Dir: dir, ExecOptions: ExecOptions{DataDir: dataDir}})
	planFile := filepath.Join(t.TempDir(), "plan.tfplan")
	if err := os.WriteFile(planFile, res.PlanFile, 0o600); err != nil {
		t.Fatal(err)
	}
	shown, err := ShowPlanFile(context.Background(), ExecOptions{ExecPath: terraformPath(t), DataDir: dataDir}, dir, planFile)
	if err != nil {
		t.Fatalf("ShowPlanFile: %v", err)
	}
	if shown.Report.PlanDigest != res.Report.PlanDigest || shown.Report.PlanFileSHA256 != res.Report.PlanFileSHA256 {
		t.Errorf("digests differ: %s/%s vs %s/%s", shown.Report.PlanDigest, shown.Report.PlanFileSHA256,
			res.Report.PlanDigest, res.Report.PlanFileSHA256)
	}
	if _, err := ShowPlanFile(context.Background(), ExecOptions{ExecPath: terraformPath(t)}, dir, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("ShowPlanFile of a missing file did not fail")
	}
}

// wrapper writes a script that records its environment and then runs
// terraform (or, for plan, sleeps when asked to), standing in as ExecPath.
func wrapper(t *testing.T, sleepOnPlan bool) (execPath, envFile string) {
	t.Helper()
	dir := t.TempDir()
	envFile = filepath.Join(dir, "env")
	sleep := ""
	if sleepOnPlan {
		sleep = `if [ "$1" = plan ]; then exec sleep 300; fi` + "\n"
	}
	script := "#!/bin/sh\nenv > " + envFile + "\n" + sleep + "exec " + terraformPath(t) + ` "$@"` + "\n"
	execPath = filepath.Join(dir, "terraform")
	if err := os.WriteFile(execPath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return execPath, envFile
}

func TestPlan_childEnvironmentHoldsOnlyWhatItNeeds(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
	t.Setenv("KUBERNETES_SERVICE_PORT", "443")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "inherited-secret")
	t.Setenv("GITHUB_TOKEN", "inherited-token")
	execPath, envFile := wrapper(t, false)
	stacks := copyStacks(t)
	plan(t, PlanOptions{
		Dir:         filepath.Join(stacks, "ordered"),
		ExecOptions: ExecOptions{ExecPath: execPath, Env: map[string]string{"KUBE_CONFIG_PATH": "/nonexistent/kubeconfig"}},
	})
	data, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		k, v, _ := strings.Cut(line, "=")
		env[k] = v
	}
	for _, k := range []string{"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN"} {
		if _, ok := env[k]; ok {
			t.Errorf("the child inherited %s", k)
		}
	}
	if env["KUBE_CONFIG_PATH"] != "/nonexistent/kubeconfig" || env["TF_IN_AUTOMATION"] == "" || env["PATH"] == "" {
		t.Errorf("missing expected variables: %v", env)
	}
	if home := env["HOME"]; home == "" || home == os.Getenv("HOME") {
		t.Errorf("HOME %q is not a private temporary folder", home)
	}
	if env["TF_DATA_DIR"] == "" {
		t.Error("TF_DATA_DIR is not set")
	}
}

func TestPlan_refusesBadOptions(t *testing.T) {
	stacks := copyStacks(t)
	dir := filepath.Join(stacks, "ordered")
	tests := []struct {
		name string
		opts PlanOptions
		want string
	}{
		{"a TF_VAR_ in the environment", PlanOptions{Dir: dir, ExecOptions: ExecOptions{Env: map[string]string{"TF_VAR_env": "x"}}}, "TF_VAR_env"},
		{"a bad workspace", PlanOptions{Dir: dir, Workspace: "a/b"}, "workspace"},
		{"a bad variable name", PlanOptions{Dir: dir, Vars: map[string]string{"a b": "x"}}, "variable name"},
		{"an unknown backend", PlanOptions{Dir: dir, Backend: "s3"}, "unknown backend"},
		{"the kubernetes backend without a namespace", PlanOptions{Dir: dir, Backend: BackendKubernetes}, "needs a namespace"},
		{"a bad namespace", PlanOptions{Dir: dir, Backend: BackendKubernetes, Kubernetes: &KubernetesBackend{Namespace: "A\"b", SecretSuffix: "x"}}, "DNS label"},
		{"a missing folder", PlanOptions{Dir: filepath.Join(stacks, "nope")}, "does not exist"},
		{"an undeclared variable", PlanOptions{Dir: dir, Vars: map[string]string{"nope": "x"}}, "terraform plan"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.opts.ExecPath = terraformPath(t)
			_, err := Plan(context.Background(), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestPlan_neverOverwritesAnOverrideFileFromTheRepo(t *testing.T) {
	stacks := copyStacks(t)
	dir := filepath.Join(stacks, "ordered")
	own := []byte("# the repository's own file\n")
	if err := os.WriteFile(filepath.Join(dir, BackendOverrideFile), own, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Plan(context.Background(), PlanOptions{Dir: dir, ExecOptions: ExecOptions{ExecPath: terraformPath(t)}})
	if err == nil || !strings.Contains(err.Error(), BackendOverrideFile) {
		t.Fatalf("want a refusal naming %s, got %v", BackendOverrideFile, err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, BackendOverrideFile)); string(got) != string(own) {
		t.Error("the repository's file was changed")
	}
}

func TestPlan_kubernetesBackendIsDeclaredByOverride(t *testing.T) {
	got, err := KubernetesBackendOverride("sluice-system", "checkout-prod")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`backend "kubernetes"`, `namespace     = "sluice-system"`, `secret_suffix = "checkout-prod"`} {
		if !strings.Contains(string(got), want) {
			t.Errorf("override lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(string(got), "config_path") || strings.Contains(string(got), "token") {
		t.Error("the override carries credentials settings")
	}
	// With no reachable cluster, init fails in the kubernetes backend: the
	// override was taken, and the error says where.
	stacks := copyStacks(t)
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: not-a-real-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Plan(context.Background(), PlanOptions{
		Dir: filepath.Join(stacks, "ordered"), Backend: BackendKubernetes,
		Kubernetes:  &KubernetesBackend{Namespace: "sluice-system", SecretSuffix: "checkout-prod"},
		ExecOptions: ExecOptions{ExecPath: terraformPath(t), Env: map[string]string{"KUBE_CONFIG_PATH": kubeconfig}},
	})
	// The error comes from init reaching the server of the kubeconfig given
	// through the environment (the request URL itself is a quoted value,
	// which diagnostics hide).
	if err == nil || !strings.Contains(err.Error(), "terraform init") ||
		!strings.Contains(err.Error(), "existing workspaces") || !strings.Contains(err.Error(), "dial tcp 127.0.0.1:1") {
		t.Fatalf("want an init error from the kubernetes backend, got %v", err)
	}
	if strings.Contains(err.Error(), "not-a-real-token") {
		t.Error("the error shows the token")
	}
}

func TestPlan_timesOutWithAClearError(t *testing.T) {
	execPath, _ := wrapper(t, true)
	stacks := copyStacks(t)
	_, err := Plan(context.Background(), PlanOptions{
		Dir:         filepath.Join(stacks, "ordered"),
		ExecOptions: ExecOptions{ExecPath: execPath, Timeout: 3 * time.Second},
	})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "timed out after 3s") {
		t.Fatalf("want a timeout error, got %v", err)
	}
	// A timeout is worth retrying, never a configuration error.
	var re *RunError
	if !errors.As(err, &re) || re.Kind != ErrorBackend || IsConfigurationError(err) {
		t.Errorf("want a back-end RunError, got %#v", err)
	}
}

// TestPlan_realDeleteAndReplaceAgainstTheStacksOwnState applies a stack with
// the terraform binary, changes it, and plans it with the stack's own
// (local) backend: the plan holds a real delete and a real replace.
func TestPlan_realDeleteAndReplaceAgainstTheStacksOwnState(t *testing.T) {
	dir := t.TempDir()
	write := func(cfg string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	const backend = `terraform {
  backend "local" {
    path = "state/terraform.tfstate"
  }
}
`
	write(backend + `
resource "terraform_data" "database" {
  triggers_replace = ["v1"]
}

resource "terraform_data" "old" {
  input = "bye"
}
`)
	// Apply the first version with the terraform CLI itself.
	dataDir := t.TempDir()
	for _, args := range [][]string{{"init", "-input=false"}, {"apply", "-input=false", "-auto-approve"}} {
		cmd := exec.Command(terraformPath(t), args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_DATA_DIR="+dataDir, "CHECKPOINT_DISABLE=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("terraform %s: %v\n%s", args[0], err, out)
		}
	}
	write(backend + `
resource "terraform_data" "database" {
  triggers_replace = ["v2"]
}
`)
	res := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn})
	if want := (Counts{Replace: 1, Delete: 1}); res.Report.Counts != want {
		t.Fatalf("counts %+v, want %+v", res.Report.Counts, want)
	}
	if res.Report.Risk != report.RiskMedium {
		t.Errorf("risk %s for unprotected terraform_data", res.Report.Risk)
	}
	// The same plan with terraform_data protected is high risk.
	r, err := Analyze(res.PlanJSON, Options{ProtectedTypes: []string{"terraform_data"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Risk != report.RiskHigh || len(r.RiskReasons) != 2 {
		t.Errorf("protected: risk %s reasons %v", r.Risk, r.RiskReasons)
	}
	if r.PlanDigest != res.Report.PlanDigest {
		t.Error("options changed the plan digest")
	}
}

// endedContextErr is what terraform-exec returns when its context ended and
// the command itself did not fail: it unwraps to nil, matches the context
// errors, and its Error method dereferences the nil error.
type endedContextErr struct{ err error }

func (e endedContextErr) Error() string { return e.err.Error() }
func (e endedContextErr) Unwrap() error { return e.err }
func (e endedContextErr) Is(t error) bool {
	return t == context.Canceled || t == context.DeadlineExceeded
}

// TestRun_aStepStoppedAsItEndsIsAnErrorNotAPanic: a step whose context is
// cancelled as terraform exits gets terraform-exec's error with nothing
// inside; reading it panicked and took the syncer down (seen in CI: a plan
// stopped because the release's chart had already failed). The step now
// fails with the context's error.
func TestRun_aStepStoppedAsItEndsIsAnErrorNotAPanic(t *testing.T) {
	tf, err := tfexec.NewTerraform(t.TempDir(), "terraform")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = ExecOptions{}.run(ctx, tf, "plan", func() error { return endedContextErr{} })
	var re *RunError
	if !errors.As(err, &re) || re.Step != "plan" || !errors.Is(err, context.Canceled) {
		t.Fatalf("run = %v, want a RunError of step plan wrapping context.Canceled", err)
	}
	if got := err.Error(); !strings.Contains(got, "context canceled") {
		t.Fatalf("error %q, want it to say the context was cancelled", got)
	}
	// Any other error is left as it is.
	other := errors.New("exit status 1")
	if got := contextOnly(ctx, other); got != other {
		t.Fatalf("contextOnly(other) = %v", got)
	}
}
