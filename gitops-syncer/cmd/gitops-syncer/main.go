// Command gitops-syncer watches infra repositories and turns each new commit
// into Releases and validated ChangeRequests (see internal/syncer).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/install"
	"github.com/sluice-gitops/sluice/operator/api/tracing"
	"github.com/sluice-gitops/sluice/operator/api/version"
)

func main() {
	var (
		opts         syncer.Options
		showVersion  bool
		namespaces   string
		tfPath       string
		tfKubeconfig string
		kubeVersion  string
	)
	flag.BoolVar(&showVersion, "version", false, "Print the version and exit.")
	flag.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint (\"0\" turns it off).")
	flag.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	flag.StringVar(&opts.ArtifactAddr, "artifact-bind-address", ":9090", "Address of the artifact server.")
	flag.StringVar(&opts.ArtifactBaseURL, "artifact-base-url", "", "Base URL of the artifact server written into ChangeRequests (default http://<artifact-bind-address>).")
	var artifactTokenFile string
	flag.StringVar(&artifactTokenFile, "artifact-token-file", "", "File holding the bearer token the artifact server requires of every request (the operator's --artifact-token-file); re-read at each request. Required.")
	flag.StringVar(&opts.DataDir, "data-dir", "/var/lib/gitops-syncer", "Folder for the git cache, artifacts and scratch space.")
	flag.BoolVar(&opts.AllowFileURLs, "allow-file-urls", false, "Allow file:// repository URLs (tests and the quickstart only).")
	flag.BoolVar(&opts.LeaderElection, "leader-elect", false, "Use leader election, for more than one replica.")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease (default: the pod's).")
	flag.StringVar(&namespaces, "namespaces", "", "Comma-separated namespaces to watch (default: all).")
	flag.IntVar(&opts.Concurrency, "concurrency", 4, "Repositories synced at once.")
	flag.StringVar(&tfPath, "terraform-path", "", "The terraform binary (default: terraform in PATH).")
	flag.StringVar(&tfKubeconfig, "terraform-kubeconfig", "", "Kubeconfig terraform uses for its state in the control namespace (default: in-cluster).")
	flag.StringVar(&kubeVersion, "kube-version", "", "Kubernetes version charts are rendered for.")
	var hooks install.Options
	hooks.BindFlags(flag.CommandLine)
	zapOpts := zap.Options{}
	zapOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	if showVersion {
		fmt.Println(version.String("gitops-syncer"))
		return
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zapOpts)))
	logger := ctrl.Log.WithName("setup")
	if namespaces != "" {
		opts.Namespaces = strings.Split(namespaces, ",")
	}
	if artifactTokenFile != "" {
		opts.ArtifactToken = artifact.TokenFile(artifactTokenFile)
	}
	tfEnv := map[string]string{"KUBE_CONFIG_PATH": tfKubeconfig}
	if tfKubeconfig == "" {
		// Terraform's kubernetes backend then uses the pod's ServiceAccount;
		// a kubeconfig limited to the state Secrets is the better choice.
		logger.Info("No --terraform-kubeconfig: terraform reaches its state with the in-cluster ServiceAccount")
		tfEnv = map[string]string{
			"KUBE_IN_CLUSTER_CONFIG":  "true",
			"KUBERNETES_SERVICE_HOST": os.Getenv("KUBERNETES_SERVICE_HOST"),
			"KUBERNETES_SERVICE_PORT": os.Getenv("KUBERNETES_SERVICE_PORT"),
		}
	}
	ctx := ctrl.SetupSignalHandler()
	// Trace ids always; spans leave the process only when an OTLP endpoint
	// is configured (OTEL_EXPORTER_OTLP_ENDPOINT).
	stopTracing, err := tracing.Setup(ctx, "gitops-syncer", version.Version)
	if err != nil {
		logger.Error(err, "Setting up tracing failed")
		os.Exit(1)
	}
	defer func() { _ = stopTracing(context.WithoutCancel(ctx)) }()
	v, err := validation.NewLibrary(ctx, validation.LibraryOptions{TerraformPath: tfPath, TerraformEnv: tfEnv, KubeVersion: kubeVersion})
	if err != nil {
		logger.Error(err, "Loading the validator failed")
		os.Exit(1)
	}
	opts.Validator = v
	s, err := syncer.New(ctrl.GetConfigOrDie(), opts)
	if err != nil {
		logger.Error(err, "Setting up the syncer failed")
		os.Exit(1)
	}
	if hooks.Enabled() {
		if _, err := install.Install(s, hooks); err != nil {
			logger.Error(err, "Setting up webhooks failed")
			os.Exit(1)
		}
	}
	logger.Info("Starting", "version", version.String("gitops-syncer"), "artifacts", s.ArtifactURL)
	if err := s.Start(ctx); err != nil {
		logger.Error(err, "The syncer stopped")
		os.Exit(1)
	}
}
