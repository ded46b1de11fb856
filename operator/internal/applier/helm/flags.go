package helm

import (
	"flag"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
)

// Flags are the operator's command-line settings of the Helm applier.
type Flags struct {
	// ArtifactBaseURL is the syncer's artifact server; artifacts are
	// downloaded from below it only. Empty leaves the applier unregistered.
	ArtifactBaseURL string
	// ArtifactTokenFile holds the bearer token the artifact server
	// requires (the syncer's --artifact-token-file).
	ArtifactTokenFile string
	// KubeVersion is the Kubernetes version charts are rendered for (the
	// validator's).
	KubeVersion string
	// Wait makes a change applied only once the objects it installed are
	// ready (Options.Wait).
	Wait bool
	// Timeout bounds hooks and the wait for readiness (Options.Timeout).
	Timeout time.Duration
	// ReadyPoll is how often a change waiting for readiness is looked at
	// when no pod of its release wakes it first (Options.ReadyPoll).
	ReadyPoll time.Duration
}

// Bind registers the flags on fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.StringVar(&f.ArtifactBaseURL, "artifact-base-url", "", "Base URL of the syncer's artifact server (http(s)://host[:port]/path/); artifacts are downloaded from below it only. Empty leaves delivery helm without an applier.")
	fs.StringVar(&f.ArtifactTokenFile, "artifact-token-file", "", "File holding the bearer token the syncer's artifact server requires (the syncer's --artifact-token-file); re-read at each download.")
	fs.StringVar(&f.KubeVersion, "helm-kube-version", "", "Kubernetes version charts are rendered for; must be the validator's (default: Helm's default, as the validator's).")
	fs.BoolVar(&f.Wait, "helm-wait", false, "Wait for the objects a Helm release installs to be ready (kstatus) before a change counts as applied; the change waits without holding a worker, and fails and is rolled back after --helm-timeout.")
	fs.DurationVar(&f.Timeout, "helm-timeout", DefaultTimeout, "How long Helm hooks and the wait for readiness (--helm-wait) may take.")
	fs.DurationVar(&f.ReadyPoll, "helm-ready-poll", DefaultReadyPoll, "How often a change waiting for readiness (--helm-wait) is looked at when no pod of its release changes readiness first.")
}

// Register adds the Helm applier for delivery helm to reg, acting through
// cfg (which must be allowed to impersonate the Repositories'
// ServiceAccounts).
func (f *Flags) Register(reg applier.Registry, cfg *rest.Config, log logr.Logger) error {
	if f.ArtifactBaseURL == "" {
		log.Info("The Helm applier is off: --artifact-base-url is not set")
		return nil
	}
	if f.ArtifactTokenFile == "" {
		log.Info("No --artifact-token-file: artifact downloads carry no credential, and the syncer's artifact server refuses them")
	}
	fetcher, err := artifact.NewFetcher(f.ArtifactBaseURL, artifact.WithTokenFile(f.ArtifactTokenFile))
	if err != nil {
		return fmt.Errorf("--artifact-base-url: %w", err)
	}
	a, err := New(Options{Config: cfg, Fetcher: fetcher, KubeVersion: f.KubeVersion, Wait: f.Wait, Timeout: f.Timeout, ReadyPoll: f.ReadyPoll, Log: log})
	if err != nil {
		return err
	}
	reg[sluicev1.DeliveryHelm] = a
	return nil
}
