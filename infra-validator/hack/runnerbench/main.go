// Command runnerbench times terraform through the sandboxed runner against
// bare terraform, on the same stack in the same run, alternating: a plan
// (init, plan, show -json) and an apply of the same plan file (init,
// apply). Both sides keep their state over HTTP (Terraform's http backend,
// which is how Sluice's runs reach its state server), each run a state of
// its own; the runner keeps a spare child as the syncer, the operator and
// the runner workload do by default. It prints the medians, the ratios
// (target: at most 1.5x) and each side's steps. Used by
// infra-validator/hack/bench.sh.
package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// stack has n terraform_data resources and the http backend (its address
// from the environment: each run a state of its own).
func stack(n int) string {
	s := "terraform {\n  backend \"http\" {}\n}\nvariable \"size\" {\n  type = string\n}\n"
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
	states := &stateServer{states: map[string][]byte{}, locks: map[string]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(ln, states) }()
	next := 0
	stateEnv := func() map[string]string {
		next++
		addr := fmt.Sprintf("http://%s/state/%d", ln.Addr(), next)
		return map[string]string{"TF_HTTP_ADDRESS": addr, "TF_HTTP_LOCK_ADDRESS": addr, "TF_HTTP_UNLOCK_ADDRESS": addr}
	}
	local := &runner.Local{Spare: true}
	defer local.Close()
	sb, err := local.Check()
	if err != nil {
		return err
	}
	// settle lets the spare child the last run left for the next one start
	// (and the machine quieten) before either side is timed.
	settle := func() { time.Sleep(500 * time.Millisecond) }
	vars := map[string]string{"size": "small"}
	planOpts := terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: local, Env: stateEnv()}, Dir: src, Vars: vars, Backend: terraform.BackendHTTP}
	first, err := terraform.Plan(ctx, planOpts)
	if err != nil {
		return err
	}
	planFile := filepath.Join(work, "approved.tfplan")
	if err := os.WriteFile(planFile, first.PlanFile, 0o644); err != nil {
		return err
	}

	var planRunner, planBare, applyRunner, applyBare, planDirect, applyDirect []time.Duration
	planSteps, planBareSteps, applySteps, applyBareSteps := stepTable{}, stepTable{}, stepTable{}, stepTable{}
	for i := 0; i < runs; i++ {
		// The same library call without a runner (terraform-exec in this
		// process, as before the runner existed).
		settle()
		t0 := time.Now()
		direct := planOpts
		direct.Runner, direct.Env = nil, stateEnv()
		if err := inCopy(work, src, func(dir string) error { direct.Dir = dir; _, err := terraform.Plan(ctx, direct); return err }); err != nil {
			return err
		}
		planDirect = append(planDirect, time.Since(t0))
		settle()
		t0 = time.Now()
		if err := inCopy(work, src, func(dir string) error {
			_, err := terraform.Apply(ctx, terraform.ApplyOptions{ExecOptions: terraform.ExecOptions{Env: stateEnv()}, Dir: dir, PlanFile: first.PlanFile, PlanFileSHA256: first.Report.PlanFileSHA256, Backend: terraform.BackendHTTP})
			return err
		}); err != nil {
			return err
		}
		applyDirect = append(applyDirect, time.Since(t0))

		settle()
		t := time.Now()
		steps := &terraform.Steps{}
		withSteps := planOpts
		withSteps.Steps, withSteps.Env = steps, stateEnv()
		if _, err := terraform.Plan(ctx, withSteps); err != nil {
			return err
		}
		planRunner = append(planRunner, time.Since(t))
		planSteps.add(steps, "analysis", time.Since(t))

		settle()
		t = time.Now()
		steps = &terraform.Steps{}
		if err := bare(work, src, tfPath, stateEnv(), steps, "plan"); err != nil {
			return err
		}
		planBare = append(planBare, time.Since(t))
		planBareSteps.add(steps, "copy", time.Since(t))

		settle()
		t = time.Now()
		steps = &terraform.Steps{}
		if _, err := terraform.Apply(ctx, terraform.ApplyOptions{
			ExecOptions: terraform.ExecOptions{Runner: local, Steps: steps, Env: stateEnv()}, Dir: src, PlanFile: first.PlanFile,
			PlanFileSHA256: first.Report.PlanFileSHA256, Backend: terraform.BackendHTTP,
		}); err != nil {
			return err
		}
		applyRunner = append(applyRunner, time.Since(t))
		applySteps.add(steps, "caller", time.Since(t))

		settle()
		t = time.Now()
		steps = &terraform.Steps{}
		if err := bare(work, src, tfPath, stateEnv(), steps, "apply", planFile); err != nil {
			return err
		}
		applyBare = append(applyBare, time.Since(t))
		applyBareSteps.add(steps, "copy", time.Since(t))
	}
	fmt.Printf("terraform runner vs bare terraform, %d terraform_data resources, %d runs each (alternating), sandbox: %s, load average %s\n", resources, runs, sb, loadavg())
	report("plan (init, plan, show -json)", median(planRunner), median(planBare))
	fmt.Printf("    runner steps (median ms): %s\n    bare steps   (median ms): %s\n", planSteps, planBareSteps)
	report("apply of the same plan file (init, apply)", median(applyRunner), median(applyBare))
	fmt.Printf("    runner steps (median ms): %s\n    bare steps   (median ms): %s\n", applySteps, applyBareSteps)
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
func bare(work, src, tfPath string, env map[string]string, steps *terraform.Steps, op string, planFile ...string) error {
	dir, err := os.MkdirTemp(work, "bare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		return err
	}
	tf := func(args ...string) error {
		defer steps.Since(args[0], time.Now())
		cmd := exec.Command(tfPath, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1", "TF_IN_AUTOMATION=1")
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
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

// stepTable gathers each step's durations over the runs.
type stepTable struct {
	order []string
	took  map[string][]time.Duration
}

// add records one run's steps and, as rest, the part of total no step
// accounts for (the caller's own work around the run).
func (t *stepTable) add(s *terraform.Steps, rest string, total time.Duration) {
	if t.took == nil {
		t.took = map[string][]time.Duration{}
	}
	var sum time.Duration
	for _, st := range append(s.List(), terraform.Step{Name: rest}) {
		if st.Name == rest {
			st.Took = total - sum
		}
		sum += st.Took
		if _, ok := t.took[st.Name]; !ok {
			t.order = append(t.order, st.Name)
		}
		t.took[st.Name] = append(t.took[st.Name], st.Took)
	}
}

func (t stepTable) String() string {
	var b strings.Builder
	for i, name := range t.order {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", name, median(t.took[name]).Milliseconds())
	}
	return b.String()
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// stateServer speaks Terraform's http backend protocol in memory, one
// state per path (GET, POST, LOCK, UNLOCK): what Sluice's state server
// speaks, without its tokens and its Kubernetes storage, so both sides keep
// their state over HTTP as Sluice's runs do.
type stateServer struct {
	mu     sync.Mutex
	states map[string][]byte
	locks  map[string]bool
}

func (s *stateServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := r.URL.Path
	switch r.Method {
	case http.MethodGet:
		b, ok := s.states[key]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = w.Write(b)
	case http.MethodPost:
		b, err := io.ReadAll(r.Body)
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		s.states[key] = b
	case "LOCK":
		if s.locks[key] {
			w.WriteHeader(http.StatusLocked)
			return
		}
		s.locks[key] = true
	case "UNLOCK":
		delete(s.locks, key)
	default:
		w.WriteHeader(http.StatusMethodNotAllowed)
	}
}
