package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
)

// RunnerTokenEnv holds the bearer token of `runner serve`.
const RunnerTokenEnv = "SLUICE_RUNNER_TOKEN"

// runRunner runs `runner serve` (the runner workload) or `runner child`
// (one sandboxed run, started by serve or by a Local runner).
func runRunner(ctx context.Context, e env, args []string) (int, error) {
	if len(args) == 0 {
		return ExitBadUsage, usagef("runner: serve or child")
	}
	switch args[0] {
	case "child":
		return runner.ChildMain(args[1:], os.Stdin, os.Stdout, os.Stderr), nil
	case "serve":
		return runnerServe(ctx, e, args[1:])
	default:
		return ExitBadUsage, usagef("runner: unknown command %q (serve or child)", args[0])
	}
}

func runnerServe(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("runner serve", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	addr := fs.String("bind-address", ":8090", "Address to serve runs on.")
	work := fs.String("work-dir", "", "Folder for the runs' working folders (default: the temporary folder).")
	tfPath := fs.String("terraform-path", "", "The terraform binary (default: terraform in PATH).")
	cache := fs.String("plugin-cache-dir", "", "Provider plugin cache, read-only to runs.")
	ports := fs.String("allow-ports", "", "Comma-separated TCP ports every run may connect to besides the state server's (provider endpoints).")
	maxRuns := fs.Int("max-runs", 2, "Runs at once; more wait.")
	spare := fs.Bool("spare", true, "Keep one child started ahead of the next run, waiting for its job (saves starting it and terraform's version check on every run; costs one idle process).")
	if err := fs.Parse(args); err != nil {
		return ExitBadUsage, usagef("%v", err)
	}
	allow, err := runner.ParsePorts(*ports)
	if err != nil {
		return ExitBadUsage, usagef("--allow-ports: %v", err)
	}
	token := os.Getenv(RunnerTokenEnv)
	if token == "" {
		return ExitBadUsage, fmt.Errorf("runner serve: $%s is empty: callers could not be told apart", RunnerTokenEnv)
	}
	// Children get an environment built from nothing anyway; the token
	// leaves this one too.
	_ = os.Unsetenv(RunnerTokenEnv)
	log := funcr.New(func(prefix, args string) { fmt.Fprintln(e.stderr, prefix, args) }, funcr.Options{LogTimestamp: true})
	self, err := os.Executable()
	if err != nil {
		return ExitBadUsage, err
	}
	local := &runner.Local{
		Command: []string{self, "runner", "child"}, TerraformPath: *tfPath, PluginCacheDir: *cache,
		WorkDir: *work, AllowPorts: allow, Log: log, Spare: *spare,
	}
	sb, err := local.Check()
	if err != nil {
		return ExitBadUsage, err
	}
	defer local.Close() // the spare child
	logSandbox(log, sb)
	srv := &runner.Server{Token: token, Local: local, MaxRuns: *maxRuns, Log: log}
	h, err := srv.Handler()
	if err != nil {
		return ExitBadUsage, err
	}
	hs := &http.Server{Addr: *addr, Handler: h, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.ListenAndServe() }()
	log.Info("Serving terraform runs", "address", *addr)
	select {
	case err := <-errc:
		return ExitBadUsage, err
	case <-ctx.Done():
	}
	// Let running jobs finish (their callers retry what does not).
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return ExitFailed, err
	}
	return ExitOK, nil
}

// logSandbox says at start how runs will be confined, loudly when not.
func logSandbox(log logr.Logger, sb runner.Sandbox) {
	runner.LogGaps(log, sb)
	if sb.LandlockABI == 0 {
		log.Info("WARNING: terraform runs are NOT confined by Landlock; only their empty environment and own folder separate them", "reason", sb.Note)
		return
	}
	log.Info("Terraform runs are confined", "sandbox", sb.String())
}
