package terraform

import (
	"context"
	"flag"
	"fmt"
	"slices"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
)

// Flags are the operator's command-line settings of the Terraform applier.
type Flags struct {
	// Apply turns the applier on (the default).
	Apply bool
	// Path is the terraform binary; "" means terraform in PATH.
	Path string
	// PassEnv names variables of the operator's environment passed on to
	// terraform (cloud credentials, provider mirror settings).
	PassEnv string
	// Runner is "local" (a sandboxed child) or the URL of the runner
	// workload; RunnerTokenFile holds the runner's token.
	Runner          string
	RunnerTokenFile string
	// RunnerSpare keeps one local runner child started ahead of the next
	// run (runner.Local.Spare).
	RunnerSpare bool
	// PluginCacheDir is the provider cache local runs may read.
	PluginCacheDir string
	// AllowPorts are TCP ports local runs may connect to besides the state
	// server's (provider endpoints), comma-separated.
	AllowPorts string
	// ArtifactTokenFile holds the artifact server's bearer token (the Helm
	// applier's --artifact-token-file).
	ArtifactTokenFile string
	// StateAddr is where the state server listens; StateBaseURL is how
	// runners reach it ("" means http://127.0.0.1:<port of StateAddr>).
	StateAddr    string
	StateBaseURL string

	// built is the applier Register made (nil when it is off).
	built *Applier
}

// Applier is the applier Register built, with its runner, state server
// and artifact fetcher (the drift controller plans with it); nil when the
// applier is off.
func (f *Flags) Applier() *Applier { return f.built }

// Bind registers the flags on fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.Apply, "terraform-apply", true, "Apply the approved Terraform plan file of changes that have one, before their manifests.")
	fs.StringVar(&f.Path, "terraform-path", "", "The terraform binary (default: terraform in PATH).")
	fs.StringVar(&f.PassEnv, "terraform-env", "", "Comma-separated names of this process's environment variables passed to terraform in its runner (e.g. cloud credentials); nothing else of the environment is.")
	fs.StringVar(&f.Runner, "terraform-runner", runner.LocalName, "Where terraform runs: \"local\" (a sandboxed child process) or the runner workload's URL, e.g. http://sluice-runner:8090.")
	fs.StringVar(&f.RunnerTokenFile, "terraform-runner-token-file", "", "File holding the runner workload's bearer token (with a --terraform-runner URL).")
	fs.BoolVar(&f.RunnerSpare, "terraform-runner-spare", true, "Keep one local runner child started ahead of the next apply or plan, waiting for its job (saves starting it and terraform's version check on every run; costs one idle process).")
	fs.StringVar(&f.PluginCacheDir, "terraform-plugin-cache-dir", "", "Provider plugin cache local runs may read (never write).")
	fs.StringVar(&f.AllowPorts, "terraform-allow-ports", "", "Comma-separated TCP ports local runs may connect to besides the state server's (provider endpoints).")
	fs.StringVar(&f.StateAddr, "state-bind-address", ":8092", "Address of the Terraform state server runs reach their release's state through.")
	fs.StringVar(&f.StateBaseURL, "state-base-url", "", "How runners reach the state server (default http://127.0.0.1:<port of --state-bind-address>).")
}

// Register starts the state server (until ctx ends) and puts the
// Terraform applier in front of every applier in reg (see Chain). It needs
// the artifact server's base URL; without one, or with
// --terraform-apply=false, reg is left as it is: plans are checked and
// stored but not applied, and the log says so.
func (f *Flags) Register(ctx context.Context, reg applier.Registry, cfg *rest.Config, artifactBaseURL string, log logr.Logger) error {
	switch {
	case !f.Apply:
		log.Info("The Terraform applier is off (--terraform-apply=false): plans are checked and stored, never applied")
		return nil
	case artifactBaseURL == "":
		log.Info("The Terraform applier is off: --artifact-base-url is not set")
		return nil
	}
	var fetchOpts []artifact.Option
	if f.ArtifactTokenFile != "" {
		fetchOpts = append(fetchOpts, artifact.WithTokenFile(f.ArtifactTokenFile))
	}
	fetcher, err := artifact.NewFetcher(artifactBaseURL, fetchOpts...)
	if err != nil {
		return fmt.Errorf("--artifact-base-url: %w", err)
	}
	run, env, err := runner.Flags{Runner: f.Runner, TokenFile: f.RunnerTokenFile, TerraformPath: f.Path,
		PluginCacheDir: f.PluginCacheDir, AllowPorts: f.AllowPorts, PassEnv: f.PassEnv, Spare: f.RunnerSpare}.Build(log)
	if err != nil {
		return err
	}
	if local, ok := run.(*runner.Local); ok {
		go func() {
			<-ctx.Done()
			local.Close() // stops the spare child
		}()
	}
	state, err := f.serveState(ctx, cfg, log)
	if err != nil {
		return err
	}
	a, err := New(Options{Config: cfg, Fetcher: fetcher, Runner: run, State: state, Env: env, Log: log})
	if err != nil {
		return err
	}
	f.built = a
	deliveries := make([]string, 0, len(reg))
	for d, next := range reg {
		reg[d] = Chain(a, next)
		deliveries = append(deliveries, string(d))
	}
	slices.Sort(deliveries)
	log.Info("Terraform plans are applied before the manifests", "deliveries", deliveries)
	return nil
}

// serveState starts the state server with the operator's own client: runs
// reach one release's state each, through the credential Apply grants.
func (f *Flags) serveState(ctx context.Context, cfg *rest.Config, log logr.Logger) (*tfstate.Server, error) {
	srv, bound, err := runner.ServeState(ctx, cfg, f.StateAddr, f.StateBaseURL, tfstate.Options{Log: log.WithName("state")})
	if err != nil {
		return nil, fmt.Errorf("--state-bind-address: %w", err)
	}
	log.Info("Serving Terraform state to runs", "address", bound.String())
	return srv, nil
}
