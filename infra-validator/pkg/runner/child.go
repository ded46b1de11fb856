package runner

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// ChildArg, as the first argument, makes a binary that calls
// MaybeRunChild the sandboxed child of a Local runner.
const ChildArg = "__sluice-terraform-runner"

// MaybeRunChild runs the runner child and exits when this process was
// started as one (os.Args[1] == ChildArg); otherwise it returns at once.
// Binaries that use Local without Command (the syncer, the operator, test
// binaries in TestMain) call it first thing in main.
func MaybeRunChild() {
	if len(os.Args) > 1 && os.Args[1] == ChildArg {
		os.Exit(ChildMain(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// ChildMain is the runner child: it reads one Job from stdin, confines
// itself (see Local), runs the job in its working folder and writes the
// Result to stdout. The exit code is 0 whenever a Result was written.
func ChildMain(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("runner child", flag.ContinueOnError)
	fs.SetOutput(stderr)
	work := fs.String("work", "", "The run's working folder (read-write; everything else is read-only or hidden).")
	tfPath := fs.String("terraform", "", "The terraform binary.")
	cache := fs.String("plugin-cache", "", "The provider plugin cache (read-only).")
	var readOnly stringsFlag
	fs.Var(&readOnly, "ro", "A further read-only path (repeatable).")
	ports := fs.String("ports", "", "Further TCP ports the run may connect to, comma-separated.")
	probeOnly := fs.Bool("probe", false, "Only set up the namespaces the child was started in, and exit (0 when they work).")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if err := enterNamespaces(); err != nil {
		fmt.Fprintln(stderr, "runner child:", err)
		return exitNoNamespace
	}
	if *probeOnly {
		return 0
	}
	if *work == "" || *tfPath == "" {
		fmt.Fprintln(stderr, "runner child: --work and --terraform are required")
		return 2
	}
	extra, err := ParsePorts(*ports)
	if err != nil {
		fmt.Fprintln(stderr, "runner child:", err)
		return 2
	}
	// terraform's version is asked while the job is on its way (or, for
	// a spare child, while it waits for one): no input of the job is
	// involved.
	prepared, err := terraform.Prepare(context.Background(), *tfPath)
	if err != nil {
		fmt.Fprintln(stderr, "runner child:", err)
		return 2
	}
	var job Job
	if err := json.NewDecoder(io.LimitReader(stdin, MaxJobBytes)).Decode(&job); err != nil {
		fmt.Fprintln(stderr, "runner child: read the job:", err)
		return 2
	}
	res := runJob(context.Background(), &job, childConfig{work: *work, terraform: *tfPath, pluginCache: *cache, readOnly: readOnly, ports: extra, prepared: prepared})
	if err := json.NewEncoder(stdout).Encode(res); err != nil {
		fmt.Fprintln(stderr, "runner child: write the result:", err)
		return 1
	}
	return 0
}

// exitNoNamespace is the child's exit code when it could not set up the
// namespaces it was started in; Local then tries a weaker containment.
const exitNoNamespace = 3

type childConfig struct {
	work, terraform, pluginCache string
	readOnly                     []string
	ports                        []uint16
	// prepared runs terraform in the current folder; runJob changes
	// into the stack folder to use it.
	prepared *terraform.Prepared
}

// runJob confines this process, then runs job in cfg.work.
func runJob(ctx context.Context, job *Job, cfg childConfig) *Result {
	ports := append(statePorts(job.Env), cfg.ports...)
	for _, p := range job.AllowPorts {
		if !slices.Contains(ports, p) {
			ports = append(ports, p)
		}
	}
	steps := &terraform.Steps{}
	if cfg.prepared != nil {
		// Its `terraform version` started unconfined; nothing runs
		// beside the job's terraform once the sandbox is on.
		t0 := time.Now()
		cfg.prepared.Wait()
		steps.Since("version", t0)
	}
	t0 := time.Now()
	sb, err := confine(cfg.work, cfg.terraform, cfg.pluginCache, cfg.readOnly, ports)
	if err != nil {
		return &Result{Error: &Error{Code: CodeInternal, Message: "sandbox: " + err.Error()}}
	}
	steps.Since("sandbox", t0)
	res := &Result{Sandbox: sb}
	defer func() { res.Steps = steps.List() }()
	fail := func(err error) *Result {
		e := wireError(err)
		e.Message = terraform.Redact(e.Message, job.secrets())
		res.Error = e
		return res
	}
	// A terminating runner stops terraform gently (it then releases its
	// lock and saves what it did) rather than leaving it mid-write.
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	src := filepath.Join(cfg.work, "src")
	if err := os.MkdirAll(filepath.Join(cfg.work, "tmp"), 0o700); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(src, 0o700); err != nil {
		return fail(err)
	}
	t0 = time.Now()
	if err := unpack(job.Files, src); err != nil {
		res.Error = &Error{Code: CodeInvalid, Message: err.Error()}
		return res
	}
	steps.Since("unpack", t0)
	dir := filepath.Join(src, filepath.FromSlash(job.Stack))
	if rel, err := filepath.Rel(src, dir); err != nil || rel == ".." || filepath.IsAbs(job.Stack) || len(rel) >= 3 && rel[:3] == ".."+string(filepath.Separator) {
		res.Error = &Error{Code: CodeInvalid, Message: "the stack folder leaves the job's files"}
		return res
	}
	exec := terraform.ExecOptions{ExecPath: cfg.terraform, Env: job.Env, Secrets: job.Secrets, Timeout: job.Timeout, Steps: steps}
	if cfg.prepared != nil && os.Chdir(dir) == nil {
		exec.Prepared = cfg.prepared
	}
	switch job.Op {
	case OpPlan:
		planFile, planJSON, err := terraform.PlanFiles(ctx, terraform.PlanOptions{
			ExecOptions: exec, Dir: dir, Vars: job.Vars, VarsFromPlanFile: job.VarsFromPlanFile, Workspace: job.Workspace, Backend: job.Backend, Destroy: job.Destroy,
		})
		if err != nil {
			return fail(err)
		}
		res.PlanFile, res.PlanJSON = planFile, planJSON
	case OpApply:
		out, err := terraform.Apply(ctx, terraform.ApplyOptions{
			ExecOptions: exec, Dir: dir, PlanFile: job.PlanFile, PlanFileSHA256: job.PlanFileSHA256,
			Workspace: job.Workspace, Backend: job.Backend, LockTimeout: job.LockTimeout, LookOnly: job.LookOnly,
		})
		if err != nil {
			return fail(err)
		}
		res.InPlace, res.State, res.StateError = out.InPlace, out.State, out.StateError
	default:
		return fail(errors.New("unknown operation " + string(job.Op)))
	}
	return res
}

// stringsFlag is a repeatable string flag.
type stringsFlag []string

func (s *stringsFlag) String() string     { return fmt.Sprint([]string(*s)) }
func (s *stringsFlag) Set(v string) error { *s = append(*s, v); return nil }
