// Command runnerbench times terraform through the sandboxed runner against
// bare terraform, on the same stack in the same run: a plan (init, plan,
// show -json) and an apply of the same plan file (init, apply). It prints
// the medians and the ratios (target: at most 1.5x). Used by
// infra-validator/hack/bench.sh.
package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"time"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// stack has n terraform_data resources and a local backend, so each run
// starts from an empty state of its own.
func stack(n int) string {
	s := "terraform {\n  backend \"local\" {}\n}\nvariable \"size\" {\n  type = string\n}\n"
	for i := 0; i < n; i++ {
		s += fmt.Sprintf("resource \"terraform_data\" \"r%d\" {\n  input = \"${var.size}-%d\"\n}\n", i, i)
	}
	return s
}

func main() {
	runner.MaybeRunChild()
	runs, resources := 7, 20
	if len(os.Args) > 1 {
		runs, _ = strconv.Atoi(os.Args[1])
	}
	if len(os.Args) > 2 {
		resources, _ = strconv.Atoi(os.Args[2])
	}
	if err := run(runs, resources); err != nil {
		fmt.Fprintln(os.Stderr, "runnerbench:", err)
		os.Exit(1)
	}
}

func run(runs, resources int) error {
	ctx := context.Background()
	tfPath, err := exec.LookPath("terraform")
	if err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "runnerbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	src := filepath.Join(work, "stack")
	if err := os.Mkdir(src, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(src, "main.tf"), []byte(stack(resources)), 0o644); err != nil {
		return err
	}
	local := &runner.Local{}
	sb, err := local.Check()
	if err != nil {
		return err
	}
	vars := map[string]string{"size": "small"}
	planOpts := terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: local}, Dir: src, Vars: vars, Backend: terraform.BackendOwn}
	first, err := terraform.Plan(ctx, planOpts)
	if err != nil {
		return err
	}
	planFile := filepath.Join(work, "approved.tfplan")
	if err := os.WriteFile(planFile, first.PlanFile, 0o644); err != nil {
		return err
	}

	var planRunner, planBare, applyRunner, applyBare, planDirect, applyDirect []time.Duration
	for i := 0; i < runs; i++ {
		// The same library call without a runner (terraform-exec in this
		// process, as before the runner existed).
		t0 := time.Now()
		direct := planOpts
		direct.Runner = nil
		if err := inCopy(work, src, func(dir string) error { direct.Dir = dir; _, err := terraform.Plan(ctx, direct); return err }); err != nil {
			return err
		}
		planDirect = append(planDirect, time.Since(t0))
		t0 = time.Now()
		if err := inCopy(work, src, func(dir string) error {
			_, err := terraform.Apply(ctx, terraform.ApplyOptions{Dir: dir, PlanFile: first.PlanFile, PlanFileSHA256: first.Report.PlanFileSHA256, Backend: terraform.BackendOwn})
			return err
		}); err != nil {
			return err
		}
		applyDirect = append(applyDirect, time.Since(t0))

		t := time.Now()
		if _, err := terraform.Plan(ctx, planOpts); err != nil {
			return err
		}
		planRunner = append(planRunner, time.Since(t))

		t = time.Now()
		if err := bare(work, src, tfPath, "plan"); err != nil {
			return err
		}
		planBare = append(planBare, time.Since(t))

		t = time.Now()
		if _, err := terraform.Apply(ctx, terraform.ApplyOptions{
			ExecOptions: terraform.ExecOptions{Runner: local}, Dir: src, PlanFile: first.PlanFile,
			PlanFileSHA256: first.Report.PlanFileSHA256, Backend: terraform.BackendOwn,
		}); err != nil {
			return err
		}
		applyRunner = append(applyRunner, time.Since(t))

		t = time.Now()
		if err := bare(work, src, tfPath, "apply", planFile); err != nil {
			return err
		}
		applyBare = append(applyBare, time.Since(t))
	}
	fmt.Printf("terraform runner vs bare terraform, %d terraform_data resources, %d runs each, sandbox: %s\n", resources, runs, sb)
	report("plan (init, plan, show -json)", median(planRunner), median(planBare))
	report("apply of the same plan file (init, apply)", median(applyRunner), median(applyBare))
	fmt.Printf("  without a runner (terraform-exec in the caller, as before): plan %s, apply %s\n",
		median(planDirect).Round(time.Millisecond), median(applyDirect).Round(time.Millisecond))
	return nil
}

func report(what string, runner, bare time.Duration) {
	fmt.Printf("  %-42s runner %7s  bare %7s  ratio %.2fx (target <= 1.5x)\n", what,
		runner.Round(time.Millisecond), bare.Round(time.Millisecond), float64(runner)/float64(bare))
}

// bare runs the same steps with terraform directly, in a fresh copy of
// the stack (as the runner does).
func bare(work, src, tfPath, op string, planFile ...string) error {
	dir, err := os.MkdirTemp(work, "bare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		return err
	}
	tf := func(args ...string) error {
		cmd := exec.Command(tfPath, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("terraform %v: %v\n%s", args, err, out)
		}
		return nil
	}
	if err := tf("init", "-input=false", "-no-color"); err != nil {
		return err
	}
	if op == "plan" {
		if err := tf("plan", "-input=false", "-no-color", "-var", "size=small", "-out", "plan.tfplan"); err != nil {
			return err
		}
		return tf("show", "-json", "plan.tfplan")
	}
	return tf("apply", "-input=false", "-no-color", planFile[0])
}

// inCopy runs f on a fresh copy of the stack.
func inCopy(work, src string, f func(dir string) error) error {
	dir, err := os.MkdirTemp(work, "direct-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		return err
	}
	return f(dir)
}

func median(d []time.Duration) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
