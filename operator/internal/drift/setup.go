package drift

import (
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-gitops/sluice/operator/internal/eventrec"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// Options configure the drift controller.
type Options struct {
	// Config is the operator's connection; checks impersonate the
	// Repositories' ServiceAccounts from it.
	Config *rest.Config
	// IgnoreManagers are the field managers whose fields are never drift;
	// nil means DefaultIgnoreManagers.
	IgnoreManagers []string
	// Terraform checks releases with a Terraform stack; nil skips them.
	Terraform Checker
	// ArgoCDServer is the destination cluster the Argo CD applier sets
	// (--argocd-server); empty compares no server.
	ArgoCDServer string
	// Concurrency is the number of parallel checks.
	Concurrency int
	// SkipNameValidation lets a test process start the controller twice.
	SkipNameValidation bool
}

// Setup registers the drift controller and its metrics with the manager.
func Setup(mgr manager.Manager, o Options) error {
	m := metrics.NewDrift()
	if err := m.Register(ctrlmetrics.Registry); err != nil {
		return err
	}
	events, err := eventrec.ForManager(mgr)
	if err != nil {
		return err
	}
	r := &Reconciler{
		Client:    mgr.GetClient(),
		Recorder:  events.GetEventRecorder("sluice-drift"),
		Helm:      &HelmChecker{Config: o.Config, Mapper: mgr.GetRESTMapper(), IgnoreManagers: o.IgnoreManagers},
		Terraform: o.Terraform,
		ArgoCD:    &ArgoCDChecker{Config: o.Config, Server: o.ArgoCDServer},
		Metrics:   m,
	}
	copts := controller.Options{MaxConcurrentReconciles: max(o.Concurrency, 1)}
	if o.SkipNameValidation {
		copts.SkipNameValidation = &o.SkipNameValidation
	}
	if err := r.SetupWithManager(mgr, copts); err != nil {
		return fmt.Errorf("set up the drift controller: %w", err)
	}
	return nil
}
