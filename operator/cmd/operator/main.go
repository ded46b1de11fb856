// Command operator is the Sluice operator: it holds every ChangeRequest at
// the approval gate and hands approved changes to an applier.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/kit/cli"
	"github.com/sluice-gitops/sluice/kit/version"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	argoapplier "github.com/sluice-gitops/sluice/operator/internal/applier/argocd"
	helmapplier "github.com/sluice-gitops/sluice/operator/internal/applier/helm"
	tfapplier "github.com/sluice-gitops/sluice/operator/internal/applier/terraform"
	"github.com/sluice-gitops/sluice/operator/internal/compliance"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
	"github.com/sluice-gitops/sluice/operator/internal/drift"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

func main() {
	// A Terraform run re-executes this binary as its sandboxed child.
	runner.MaybeRunChild()
	// Argo CD's repo-server runs `operator argocd-cmp generate` as the
	// Sluice config management plugin.
	if len(os.Args) > 1 && os.Args[1] == argoapplier.CMPCommand {
		os.Exit(argoapplier.RunCMP(os.Args[2:], os.Stdout, os.Stderr))
	}
	var (
		o            controller.ManagerOptions
		common       = cli.Common{Binary: "operator"}
		testAppliers string
		helmFlags    helmapplier.Flags
		tfFlags      tfapplier.Flags
		argoFlags    argoapplier.Flags
		driftFlags   drift.Flags
		compFlags    compliance.Flags
	)
	helmFlags.Bind(flag.CommandLine)
	argoFlags.Bind(flag.CommandLine)
	tfFlags.Bind(flag.CommandLine)
	driftFlags.Bind(flag.CommandLine)
	compFlags.Bind(flag.CommandLine)
	flag.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8080", "Address of the /metrics endpoint (\"0\" disables it).")
	flag.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "Address of the /healthz and /readyz endpoints.")
	flag.StringVar(&o.PprofAddr, "pprof-bind-address", "127.0.0.1:6060", "Address of the pprof endpoint; loopback or private addresses only (\"0\" disables it).")
	flag.BoolVar(&o.LeaderElection, "leader-elect", true, "Elect a leader, so only one replica reconciles.")
	flag.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "Namespace of the leader election Lease (default: the pod's namespace).")
	flag.DurationVar(&o.LeaseDuration, "leader-elect-lease-duration", 0, "How long a non-leader waits before taking over an unrenewed lease (default 60s).")
	flag.DurationVar(&o.RenewDeadline, "leader-elect-renew-deadline", 0, "How long the leader keeps retrying to renew before it gives up (default 40s).")
	flag.DurationVar(&o.RetryPeriod, "leader-elect-retry-period", 0, "How often leader election clients retry (default 5s).")
	flag.IntVar(&o.Concurrency, "concurrency", 4, "Parallel reconciles per controller.")
	flag.IntVar(&o.KeepChangeRequests, "keep-changerequests", 20, "ChangeRequests kept per Release; older terminal ones are deleted.")
	flag.DurationVar(&o.ApprovalGracePeriod, "approval-grace-period", 0, "How long an Approval matching no ChangeRequest is kept (default 10m).")
	flag.DurationVar(&o.LockRetryInterval, "lock-retry-interval", 0, "How often a lock that no watch frees is looked at again: a change in Applying whose lock a manual edit gave away, or a lock held by another release's change (default 30s). Changes waiting in line do not poll.")
	flag.StringVar(&o.Shard, "shard", "", "Shard key served: only Repositories, Releases, ChangeRequests and Approvals labelled sharding.sluice.dev/key=<shard> are watched, cached and reconciled, and the leader election Lease is named after it. Empty serves the objects without the label.")
	common.Bind(flag.CommandLine, "Comma-separated control namespaces to watch (default: all).")
	flag.StringVar(&testAppliers, "test-applier", "", "FOR DEMOS AND TESTS ONLY: comma-separated deliveries (helm,argocd) handled by the record-only test applier, which installs nothing and only records changes in a ConfigMap.")
	flag.Parse()

	log, done := common.Start(os.Stdout)
	if done {
		return
	}
	o.Namespaces = common.Namespaces()
	if err := run(log, &common, o, testAppliers, helmFlags, argoFlags, tfFlags, driftFlags, compFlags); err != nil {
		log.Error(err, "Operator failed")
		os.Exit(1)
	}
}

func run(log logr.Logger, common *cli.Common, o controller.ManagerOptions, testAppliers string, helmFlags helmapplier.Flags, argoFlags argoapplier.Flags, tfFlags tfapplier.Flags, driftFlags drift.Flags, compFlags compliance.Flags) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	ctx := ctrl.SetupSignalHandler()
	stopTracing, err := common.Tracing(ctx)
	if err != nil {
		return err
	}
	defer stopTracing()

	// The appliers, one per delivery mode (Applier and, optionally,
	// Cleaner from internal/applier). Each applier package is registered
	// here, e.g. o.Appliers[sluicev1.DeliveryHelm] = <the Helm applier>.
	o.Appliers = applier.Registry{}
	if err := helmFlags.Register(o.Appliers, cfg, ctrl.Log.WithName("helm")); err != nil {
		return err
	}
	argoFlags.ArtifactBaseURL, argoFlags.ArtifactTokenFile = helmFlags.ArtifactBaseURL, helmFlags.ArtifactTokenFile
	if err := argoFlags.Register(o.Appliers, cfg, ctrl.Log.WithName("argocd")); err != nil {
		return err
	}
	if testAppliers != "" {
		apiClient, err := newAPIClient(cfg)
		if err != nil {
			return err
		}
		ta := &testapplier.Applier{Client: apiClient}
		for _, d := range strings.Split(testAppliers, ",") {
			delivery := sluicev1.Delivery(strings.TrimSpace(d))
			if delivery != sluicev1.DeliveryHelm && delivery != sluicev1.DeliveryArgoCD {
				return fmt.Errorf("--test-applier: unknown delivery %q (helm or argocd)", d)
			}
			log.Info("Registering the record-only TEST applier; nothing will be installed", "delivery", delivery)
			o.Appliers[delivery] = ta
		}
	}
	// Terraform goes in front of whichever applier each delivery has.
	tfFlags.ArtifactTokenFile = helmFlags.ArtifactTokenFile
	if err := tfFlags.Register(ctx, o.Appliers, cfg, helmFlags.ArtifactBaseURL, ctrl.Log.WithName("terraform")); err != nil {
		return err
	}

	// Verification's health judges the objects a Helm change installed,
	// read as the Repository's ServiceAccount (the mapper is the manager's).
	applied := &drift.HelmChecker{Config: cfg}
	o.AppliedObjects = applied.AppliedObjects
	mgr, err := controller.NewManager(ctx, cfg, o)
	if err != nil {
		return err
	}
	applied.Mapper = mgr.GetRESTMapper()
	if a := tfFlags.Applier(); a != nil {
		// Terraform drift is planned with the applier's runner and state server.
		driftFlags.Planner = a
	}
	driftFlags.ArgoCDServer = argoFlags.Server
	if err := driftFlags.Register(mgr, cfg, o.Concurrency); err != nil {
		return err
	}
	if err := compFlags.Register(ctx, mgr, cfg); err != nil {
		return err
	}
	log.Info("Starting", "version", version.String("operator"))
	return mgr.Start(ctx)
}

// newAPIClient is an uncached client for appliers that must read their own
// records fresh.
func newAPIClient(cfg *rest.Config) (client.Client, error) {
	scheme, err := controller.NewScheme()
	if err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, fmt.Errorf("create API client: %w", err)
	}
	return c, nil
}
