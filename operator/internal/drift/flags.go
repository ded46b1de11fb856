package drift

import (
	"flag"
	"strings"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Flags are the operator's drift detection flags.
type Flags struct {
	// Enabled runs the drift controller (each Repository still opts in).
	Enabled bool
	// IgnoreManagers is a comma-separated list of field managers whose
	// fields are never drift.
	IgnoreManagers string
	// Planner plans the applied configuration of releases with a
	// Terraform stack (the Terraform applier); nil skips their Terraform
	// part. Set by the program, not a flag.
	Planner ApplyPlanner
	// ArgoCDServer is the Argo CD applier's destination cluster
	// (--argocd-server), which the Applications must keep. Set by the
	// program, not a flag.
	ArgoCDServer string
}

// Bind registers the flags.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.Enabled, "drift", true, "Run drift detection for Repositories whose spec.drift.mode is warn or revert.")
	fs.StringVar(&f.IgnoreManagers, "drift-ignore-managers", strings.Join(DefaultIgnoreManagers, ","), "Comma-separated field managers whose fields are never drift (controllers such as the HorizontalPodAutoscaler).")
}

// Register sets up the drift controller on the manager when enabled.
func (f *Flags) Register(mgr manager.Manager, cfg *rest.Config, concurrency int) error {
	if !f.Enabled {
		return nil
	}
	ignore := []string{}
	for _, m := range strings.Split(f.IgnoreManagers, ",") {
		if m = strings.TrimSpace(m); m != "" {
			ignore = append(ignore, m)
		}
	}
	o := Options{Config: cfg, IgnoreManagers: ignore, Concurrency: concurrency, ArgoCDServer: f.ArgoCDServer}
	if f.Planner != nil {
		o.Terraform = &TerraformChecker{Planner: f.Planner}
	}
	return Setup(mgr, o)
}
