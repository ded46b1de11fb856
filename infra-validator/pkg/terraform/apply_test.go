package terraform

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// localStack writes a stack that keeps its state in dir/state (its own
// backend, so a plan of it can be applied).
func localStack(t *testing.T, dir, value string) {
	t.Helper()
	cfg := `terraform {
  backend "local" {
    path = "state/terraform.tfstate"
  }
}

variable "greeting" {
  type = string
}

resource "terraform_data" "app" {
  input = "` + value + `-${var.greeting}"
}

output "app" {
  value = terraform_data.app.output
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// stateOutput reads output "app" from the stack's local state.
func stateOutput(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "state", "terraform.tfstate"))
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Outputs map[string]struct{ Value any } `json:"outputs"`
	}
	if err := json.Unmarshal(b, &st); err != nil {
		t.Fatal(err)
	}
	v, _ := st.Outputs["app"].Value.(string)
	return v
}

func applyOpts(t *testing.T, dir string, res *PlanResult) ApplyOptions {
	return ApplyOptions{
		ExecOptions:    ExecOptions{ExecPath: terraformPath(t)},
		Dir:            dir,
		PlanFile:       res.PlanFile,
		PlanFileSHA256: res.Report.PlanFileSHA256,
		Backend:        BackendOwn,
	}
}

func TestApply_appliesTheApprovedPlanFileAndNeverAStaleOne(t *testing.T) {
	dir := t.TempDir()
	localStack(t, dir, "v1")
	vars := map[string]string{"greeting": "hello"}
	first := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, Vars: vars})
	// A second plan of the same state, made before the first is applied.
	second := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, Vars: map[string]string{"greeting": "other"}})

	if res, err := Apply(context.Background(), applyOpts(t, dir, first)); err != nil || res.InPlace {
		t.Fatalf("apply: %+v %v", res, err)
	}
	if got := stateOutput(t, dir); got != "v1-hello" {
		t.Fatalf("state output %q after apply, want the planned v1-hello", got)
	}
	if _, err := os.Stat(filepath.Join(dir, BackendOverrideFile)); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}

	// The same file again (as after a restart that lost the record): stale
	// for terraform, but the approved configuration is what is deployed.
	res, err := Apply(context.Background(), applyOpts(t, dir, first))
	if err != nil || !res.InPlace {
		t.Fatalf("the applied plan again: want InPlace, got %+v %v", res, err)
	}
	// The other plan of the old state wants other values: stale, nothing
	// applied.
	_, err = Apply(context.Background(), applyOpts(t, dir, second))
	if !errors.Is(err, ErrStalePlan) {
		t.Fatalf("a plan of the old state: want ErrStalePlan, got %v", err)
	}
	if got := stateOutput(t, dir); got != "v1-hello" {
		t.Fatalf("a stale plan changed the state: %q", got)
	}

	// After a fresh plan, a change goes through.
	localStack(t, dir, "v2")
	third := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, Vars: vars})
	if _, err := Apply(context.Background(), applyOpts(t, dir, third)); err != nil {
		t.Fatalf("apply v2: %v", err)
	}
	if got := stateOutput(t, dir); got != "v2-hello" {
		t.Fatalf("state output %q, want v2-hello", got)
	}
}

func TestApply_refusesAPlanFileOtherThanTheApprovedOne(t *testing.T) {
	dir := t.TempDir()
	localStack(t, dir, "v1")
	res := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, Vars: map[string]string{"greeting": "hi"}})
	o := applyOpts(t, dir, res)
	o.PlanFile = append(append([]byte(nil), res.PlanFile...), 0)
	if _, err := Apply(context.Background(), o); !errors.Is(err, ErrPlanFileMismatch) {
		t.Fatalf("a changed plan file: want ErrPlanFileMismatch, got %v", err)
	}
	o = applyOpts(t, dir, res)
	o.PlanFileSHA256 = ""
	if _, err := Apply(context.Background(), o); !errors.Is(err, ErrPlanFileMismatch) {
		t.Fatalf("no approved digest: want ErrPlanFileMismatch, got %v", err)
	}
	if got := stateOutput(t, dir); got != "" {
		t.Fatalf("a refused plan changed the state: %q", got)
	}
}

func TestApply_refusesBadOptions(t *testing.T) {
	dir := t.TempDir()
	localStack(t, dir, "v1")
	ok := ApplyOptions{Dir: dir, PlanFile: []byte("x"), PlanFileSHA256: PlanFileSHA256([]byte("x")), Backend: BackendOwn}
	cases := []struct {
		name string
		edit func(*ApplyOptions)
		want string
	}{
		{"no folder", func(o *ApplyOptions) { o.Dir = "" }, "no stack folder"},
		{"a missing folder", func(o *ApplyOptions) { o.Dir = filepath.Join(dir, "nope") }, "does not exist"},
		{"a stateless backend", func(o *ApplyOptions) { o.Backend = BackendNone }, "never applied"},
		{"no backend", func(o *ApplyOptions) { o.Backend = "" }, "never applied"},
		{"an unknown backend", func(o *ApplyOptions) { o.Backend = "s3" }, "unknown backend"},
		{"a bad workspace", func(o *ApplyOptions) { o.Workspace = "../x" }, "workspace"},
		{"the kubernetes backend without a namespace", func(o *ApplyOptions) { o.Backend = BackendKubernetes }, "needs a namespace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := ok
			o.ExecPath = terraformPath(t)
			tc.edit(&o)
			_, err := Apply(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error containing %q, got %v", tc.want, err)
			}
		})
	}
}
