package argocd

import (
	"flag"
	"fmt"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
)

// Flags are the operator's command-line settings of the Argo CD applier.
type Flags struct {
	Apply     bool
	Namespace string
	Server    string
	Wait      time.Duration
	// ArtifactBaseURL and ArtifactTokenFile are the Helm applier's
	// (--artifact-base-url, --artifact-token-file), set by main.
	ArtifactBaseURL   string
	ArtifactTokenFile string
}

// Bind registers the flags on fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.Apply, "argocd-apply", true, "Apply delivery argocd changes through Argo CD Applications in the control namespace (needs Argo CD's Application CRD and apps in any namespace).")
	fs.StringVar(&f.Namespace, "argocd-namespace", DefaultNamespace, "Argo CD's namespace, where Sluice keeps one AppProject per Repository.")
	fs.StringVar(&f.Server, "argocd-server", InClusterServer, "Destination cluster of the Applications.")
	fs.DurationVar(&f.Wait, "argocd-wait", DefaultWait, "How long one apply watches an Argo CD sync before it looks again later.")
}

// Register adds the Argo CD applier for delivery argocd to reg when the
// API server serves Argo CD's Application kind; otherwise it logs why
// delivery argocd has no applier (such changes then fail with NoApplier).
func (f *Flags) Register(reg applier.Registry, cfg *rest.Config, log logr.Logger) error {
	if !f.Apply {
		log.Info("The Argo CD applier is off (--argocd-apply=false)")
		return nil
	}
	if f.ArtifactBaseURL == "" {
		log.Info("No --artifact-base-url: delivery argocd has no applier (the approved manifest comes from the artifact)")
		return nil
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fmt.Errorf("argocd applier: %w", err)
	}
	resources, err := dc.ServerResourcesForGroupVersion(ApplicationGVK.GroupVersion().String())
	switch {
	case apierrors.IsNotFound(err):
		log.Info("Argo CD's Application kind is not served: delivery argocd has no applier")
		return nil
	case err != nil:
		return fmt.Errorf("argocd applier: discover %s: %w", ApplicationGVK.GroupVersion(), err)
	}
	served := false
	for _, r := range resources.APIResources {
		served = served || r.Kind == ApplicationGVK.Kind
	}
	if !served {
		log.Info("Argo CD's Application kind is not served: delivery argocd has no applier")
		return nil
	}
	fetcher, err := artifact.NewFetcher(f.ArtifactBaseURL, artifact.WithTokenFile(f.ArtifactTokenFile))
	if err != nil {
		return fmt.Errorf("argocd applier: %w", err)
	}
	a, err := New(Options{Config: cfg, Fetcher: fetcher, Namespace: f.Namespace, Server: f.Server, Wait: f.Wait, Log: log})
	if err != nil {
		return err
	}
	reg[sluicev1.DeliveryArgoCD] = a
	return nil
}
