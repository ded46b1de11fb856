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
	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/kit/tracing"
	"github.com/sluice-gitops/sluice/kit/version"
)

func main() {
	// A Terraform run re-executes this binary as its sandboxed child.
	runner.MaybeRunChild()
	var (
		opts        syncer.Options
		showVersion bool
		namespaces  string
		tfFlags     validation.Flags
		kubeVersion string
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
	tfFlags.Bind(flag.CommandLine)
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
	ctx := ctrl.SetupSignalHandler()
	// Trace ids always; spans leave the process only when an OTLP endpoint
	// is configured (OTEL_EXPORTER_OTLP_ENDPOINT).
	stopTracing, err := tracing.Setup(ctx, "gitops-syncer", version.Version)
	if err != nil {
		logger.Error(err, "Setting up tracing failed")
		os.Exit(1)
	}
	defer func() { _ = stopTracing(context.WithoutCancel(ctx)) }()
	cfg := ctrl.GetConfigOrDie()
	v, err := tfFlags.Library(ctx, cfg, kubeVersion, ctrl.Log.WithName("terraform"))
	if err != nil {
		logger.Error(err, "Loading the validator failed")
		os.Exit(1)
	}
	opts.Validator = v
	s, err := syncer.New(cfg, opts)
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
