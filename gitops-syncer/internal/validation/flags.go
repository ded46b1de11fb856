package validation

import (
	"context"
	"flag"
	"fmt"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
)

// Flags are the syncer's command-line settings of Terraform planning.
type Flags struct {
	Path            string
	Kubeconfig      string
	Runner          string
	RunnerTokenFile string
	RunnerSpare     bool
	PluginCacheDir  string
	AllowPorts      string
	PassEnv         string
	StateAddr       string
	StateBaseURL    string
}

// Bind registers the flags on fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.StringVar(&f.Path, "terraform-path", "", "The terraform binary (default: terraform in PATH).")
	fs.StringVar(&f.Kubeconfig, "terraform-kubeconfig", "", "Kubeconfig the state server reads and locks the Terraform state with (default: the syncer's own connection). Terraform itself never gets it.")
	fs.StringVar(&f.Runner, "terraform-runner", runner.LocalName, "Where terraform runs: \"local\" (a sandboxed child process) or the runner workload's URL, e.g. http://sluice-runner:8090.")
	fs.StringVar(&f.RunnerTokenFile, "terraform-runner-token-file", "", "File holding the runner workload's bearer token (with a --terraform-runner URL).")
	fs.BoolVar(&f.RunnerSpare, "terraform-runner-spare", true, "Keep one local runner child started ahead of the next plan, waiting for its job (saves starting it and terraform's version check on every plan; costs one idle process).")
	fs.StringVar(&f.PluginCacheDir, "terraform-plugin-cache-dir", "", "Provider plugin cache local runs may read (never write).")
	fs.StringVar(&f.AllowPorts, "terraform-allow-ports", "", "Comma-separated TCP ports local runs may connect to besides the state server's (provider endpoints).")
	fs.StringVar(&f.PassEnv, "terraform-env", "", "Comma-separated names of this process's environment variables passed to terraform in its runner (provider settings); nothing else of the environment is.")
	fs.StringVar(&f.StateAddr, "state-bind-address", ":8092", "Address of the Terraform state server plans reach their release's state through.")
	fs.StringVar(&f.StateBaseURL, "state-base-url", "", "How runners reach the state server (default http://127.0.0.1:<port of --state-bind-address>).")
}

// Library starts the state server (until ctx ends) and returns the
// validator planning through the configured runner. cfg is the syncer's
// own connection, used by the state server unless --terraform-kubeconfig
// names another.
func (f *Flags) Library(ctx context.Context, cfg *rest.Config, kubeVersion string, log logr.Logger) (*Library, error) {
	run, env, err := runner.Flags{Runner: f.Runner, TokenFile: f.RunnerTokenFile, TerraformPath: f.Path,
		PluginCacheDir: f.PluginCacheDir, AllowPorts: f.AllowPorts, PassEnv: f.PassEnv, Spare: f.RunnerSpare}.Build(log)
	if err != nil {
		return nil, err
	}
	if local, ok := run.(*runner.Local); ok {
		go func() {
			<-ctx.Done()
			local.Close() // stops the spare child
		}()
	}
	stateCfg := cfg
	if f.Kubeconfig != "" {
		if stateCfg, err = clientcmd.BuildConfigFromFlags("", f.Kubeconfig); err != nil {
			return nil, fmt.Errorf("--terraform-kubeconfig: %w", err)
		}
	}
	state, err := ServeState(ctx, stateCfg, f.StateAddr, f.StateBaseURL, log)
	if err != nil {
		return nil, err
	}
	return NewLibrary(ctx, LibraryOptions{TerraformPath: f.Path, TerraformEnv: env, Runner: run, State: state, KubeVersion: kubeVersion})
}

// ServeState starts a state server on addr (until ctx ends) reading and
// locking state with cfg; runners reach it at base ("" means
// http://127.0.0.1:<port>).
func ServeState(ctx context.Context, cfg *rest.Config, addr, base string, log logr.Logger) (*tfstate.Server, error) {
	srv, bound, err := runner.ServeState(ctx, cfg, addr, base, tfstate.Options{Log: log.WithName("state")})
	if err != nil {
		return nil, fmt.Errorf("--state-bind-address: %w", err)
	}
	log.Info("Serving Terraform state to plans", "address", bound.String())
	return srv, nil
}
