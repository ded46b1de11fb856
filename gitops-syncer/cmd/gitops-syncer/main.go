// Command gitops-syncer watches infra repositories and turns each new commit
// into Releases and validated ChangeRequests (see internal/syncer).
package main

import (
	"flag"
	"os"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/install"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/kit/cli"
	"github.com/sluice-gitops/sluice/kit/version"
)

func main() {
	// A Terraform run re-executes this binary as its sandboxed child.
	runner.MaybeRunChild()
	var (
		opts        syncer.Options
		common      = cli.Common{Binary: "gitops-syncer"}
		tfFlags     validation.Flags
		kubeVersion string
	)
	flag.StringVar(&opts.MetricsAddr, "metrics-bind-address", ":8080", "Address of the metrics endpoint (\"0\" turns it off).")
	flag.StringVar(&opts.ProbeAddr, "health-probe-bind-address", ":8081", "Address of /healthz and /readyz.")
	flag.StringVar(&opts.ArtifactAddr, "artifact-bind-address", ":9090", "Address of the artifact server.")
	flag.StringVar(&opts.ArtifactBaseURL, "artifact-base-url", "", "Base URL of the artifact server written into ChangeRequests (default http://127.0.0.1:<port of --artifact-bind-address>).")
	var artifactTokenFile string
	flag.StringVar(&artifactTokenFile, "artifact-token-file", "", "File holding the bearer token the artifact server requires of every request (the operator's --artifact-token-file); re-read at each request. Required.")
	flag.StringVar(&opts.DataDir, "data-dir", "/var/lib/gitops-syncer", "Folder for the git cache, artifacts and scratch space.")
	flag.BoolVar(&opts.AllowFileURLs, "allow-file-urls", false, "Allow file:// repository URLs (tests and the quickstart only).")
	flag.BoolVar(&opts.LeaderElection, "leader-elect", false, "Use leader election, for more than one replica.")
	flag.StringVar(&opts.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election lease (default: the pod's).")
	flag.StringVar(&opts.Shard, "shard", "", "Shard key served: only Repositories labelled sharding.sluice.dev/key=<shard> (and their Releases, ChangeRequests, Approvals) are watched, cached and synced, and the leader election Lease is named after it. Empty serves the objects without the label.")
	common.Bind(flag.CommandLine, "Comma-separated namespaces to watch (default: all).")
	flag.IntVar(&opts.Concurrency, "concurrency", 4, "Repositories synced at once.")
	flag.DurationVar(&opts.ChartDigestRecheck, "chart-digest-recheck", 10*time.Minute, "How long the digest a chart's version range resolved to in an OCI registry is taken again while the range picks the same version, so a re-sync asks only for the tag list (0: ask for the digest every pass). A tag moved in the registry is noticed within it.")
	tfFlags.Bind(flag.CommandLine)
	flag.StringVar(&kubeVersion, "kube-version", "", "Kubernetes version charts are rendered for.")
	var hooks install.Options
	hooks.BindFlags(flag.CommandLine)
	flag.Parse()

	logger, done := common.Start(os.Stdout)
	if done {
		return
	}
	opts.Namespaces = common.Namespaces()
	if artifactTokenFile != "" {
		opts.ArtifactToken = artifact.TokenFile(artifactTokenFile)
	}
	ctx := ctrl.SetupSignalHandler()
	stopTracing, err := common.Tracing(ctx)
	if err != nil {
		logger.Error(err, "Setting up tracing failed")
		os.Exit(1)
	}
	defer stopTracing()
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
