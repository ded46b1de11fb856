package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const stack = `variable "env" {
  type = string
}

resource "terraform_data" "app" {
  input = "app-${var.env}"
}
`

// TestRun_terraformPlansAFolderAndChecksAPlanFile uses the real terraform
// (built-in terraform_data only, offline): --dir plans, --plan-file shows.
func TestRun_terraformPlansAFolderAndChecksAPlanFile(t *testing.T) {
	tf, err := exec.LookPath("terraform")
	if err != nil {
		t.Fatal("terraform is not on PATH; the Terraform tests need it")
	}
	dir := t.TempDir()
	writeFile(t, dir, "main.tf", stack)

	code, out, errOut := run(t, "terraform", "--dir", dir, "--var", "env=prod")
	if code != ExitOK || !strings.Contains(out, "plan: 1 to add, 0 to change, 0 to destroy") || !strings.Contains(out, "planFileSHA256: sha256:") {
		t.Fatalf("--dir: exit %d\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, ".terraform")); err == nil {
		t.Fatal("planning a folder must not leave Terraform's working data in it")
	}
	if code, _, errOut := run(t, "terraform", "--dir", dir); code != ExitBadUsage || errOut == "" {
		t.Fatalf("a missing variable is a clear error: %d %s", code, errOut)
	}

	// A binary plan made by terraform itself, checked with --plan-file.
	for _, args := range [][]string{{"init", "-input=false"}, {"plan", "-input=false", "-var", "env=staging", "-out", "app.plan"}} {
		cmd := exec.Command(tf, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TF_IN_AUTOMATION=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("terraform %v: %v\n%s", args, err, out)
		}
	}
	code, out, errOut = run(t, "terraform", "--plan-file", filepath.Join(dir, "app.plan"), "--dir", dir, "-o", "json")
	if code != ExitOK || !strings.Contains(out, `"planFileSHA256"`) || !strings.Contains(out, `"planDigest"`) {
		t.Fatalf("--plan-file: exit %d\n%s\n%s", code, out, errOut)
	}
	writeFile(t, dir, "garbage.plan", "not a plan")
	if code, _, errOut := run(t, "terraform", "--plan-file", filepath.Join(dir, "garbage.plan"), "--dir", dir); code != ExitBadUsage || errOut == "" {
		t.Fatalf("a broken plan file is exit 2: %d %s", code, errOut)
	}
}
