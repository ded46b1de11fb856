package terraform

import (
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

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
}

// Bind registers the flags on fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.Apply, "terraform-apply", true, "Apply the approved Terraform plan file of changes that have one, before their manifests.")
	fs.StringVar(&f.Path, "terraform-path", "", "The terraform binary (default: terraform in PATH).")
	fs.StringVar(&f.PassEnv, "terraform-env", "", "Comma-separated names of this process's environment variables passed to terraform (e.g. cloud credentials); nothing else of the environment is.")
}

// Register puts the Terraform applier in front of every applier in reg
// (see Chain). It needs the artifact server's base URL; without one, or
// with --terraform-apply=false, reg is left as it is: plans are checked and
// stored but not applied, and the log says so.
func (f *Flags) Register(reg applier.Registry, cfg *rest.Config, artifactBaseURL string, log logr.Logger) error {
	switch {
	case !f.Apply:
		log.Info("The Terraform applier is off (--terraform-apply=false): plans are checked and stored, never applied")
		return nil
	case artifactBaseURL == "":
		log.Info("The Terraform applier is off: --artifact-base-url is not set")
		return nil
	}
	fetcher, err := artifact.NewFetcher(artifactBaseURL)
	if err != nil {
		return fmt.Errorf("--artifact-base-url: %w", err)
	}
	env := map[string]string{}
	for _, name := range strings.Split(f.PassEnv, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if v, ok := os.LookupEnv(name); ok {
			env[name] = v
		} else {
			log.Info("--terraform-env names a variable that is not set", "name", name)
		}
	}
	a, err := New(Options{Config: cfg, Fetcher: fetcher, ExecPath: f.Path, Env: env, Log: log})
	if err != nil {
		return err
	}
	deliveries := make([]string, 0, len(reg))
	for d, next := range reg {
		reg[d] = Chain(a, next)
		deliveries = append(deliveries, string(d))
	}
	slices.Sort(deliveries)
	log.Info("Terraform plans are applied before the manifests", "deliveries", deliveries)
	return nil
}
