// Package syncer wires the gitops-syncer process: the controller-runtime
// manager with the Repository reconciler, leader election, metrics and
// health probes, and the artifact server. cmd/gitops-syncer only parses
// flags; tests, benchmarks and the quickstart start the same wiring
// in-process.
package syncer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/controller"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/metrics"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/shardwatch"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	sluicescheme "github.com/sluice-gitops/sluice/operator/api/scheme"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Options configure the syncer.
type Options struct {
	// MetricsAddr serves /metrics ("0" turns it off).
	MetricsAddr string
	// ProbeAddr serves /healthz and /readyz ("0" or "" turns them off).
	ProbeAddr string
	// ArtifactAddr serves the artifacts.
	ArtifactAddr string
	// ArtifactBaseURL is written into ChangeRequests; the operator
	// downloads only from it. Defaults to http://127.0.0.1:<port of
	// ArtifactAddr> (runner.BaseURL, as for the state server).
	ArtifactBaseURL string
	// ArtifactToken is the bearer token the artifact server requires of
	// every request (the operator's). Required.
	ArtifactToken artifact.TokenSource
	// DataDir holds the git cache, the artifact store and scratch space.
	DataDir string
	// AllowFileURLs allows file:// repository URLs (tests, quickstart).
	AllowFileURLs bool
	// LeaderElection turns on leader election in LeaderElectionNamespace.
	LeaderElection          bool
	LeaderElectionNamespace string
	// Shard is the shard key served (sluicev1.LabelShard): the cache holds
	// only Repositories, Releases, ChangeRequests and Approvals carrying it
	// ("" serves those without the label), and the leader election Lease is
	// named after it.
	Shard string
	// ChartDigestRecheck: how long a chart range's digest from an OCI
	// registry is taken again while the range picks the same version
	// (RepositoryReconciler.ChartDigestRecheck; zero asks every pass).
	ChartDigestRecheck time.Duration
	// Registry takes the sluice_* metrics; controller-runtime's global
	// registry (served on the metrics endpoint) when nil. Tests running
	// syncers of several shards in one process give each its own.
	Registry prometheus.Registerer
	// ShardWatchInterval is how often the unsharded syncer's leader checks
	// the shards' Leases (ShardAvailable); 15 seconds when zero. It runs
	// with leader election in LeaderElectionNamespace only.
	ShardWatchInterval time.Duration
	// Namespaces restricts the syncer to these namespaces (all when empty).
	Namespaces []string
	// Concurrency is the number of Repositories synced at once.
	Concurrency int
	// SkipNameValidation lets several syncers run in one process (tests).
	SkipNameValidation bool
	// Validator checks each changed release. Required: the syncer never
	// invents a verdict.
	Validator validation.Validator
}

// Syncer is a configured, not yet started, syncer.
type Syncer struct {
	Manager    manager.Manager
	Reconciler *controller.RepositoryReconciler
	Git        *git.GoGit
	// ArtifactURL is the base URL artifacts are served under.
	ArtifactURL string
	listener    net.Listener
}

// LeaderElectionID names the syncer's leader election lease.
const LeaderElectionID = sluicev1.SyncerLeaseName

// New builds the manager and registers the reconciler and the artifact
// server (which runs on every replica, not only the leader).
func New(cfg *rest.Config, opts Options) (*Syncer, error) {
	if opts.Validator == nil {
		return nil, errors.New("a validator is required")
	}
	if opts.DataDir == "" {
		return nil, errors.New("a data folder is required")
	}
	if opts.ArtifactToken == nil {
		return nil, errors.New("an artifact token is required: the artifact server serves only callers that present it")
	}
	if _, err := opts.ArtifactToken(); err != nil {
		return nil, fmt.Errorf("artifact token: %w", err)
	}
	dirs := map[string]string{"git": "", "artifacts": "", "scratch": ""}
	for name := range dirs {
		d := filepath.Join(opts.DataDir, name)
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
		dirs[name] = d
	}
	ln, err := net.Listen("tcp", opts.ArtifactAddr)
	if err != nil {
		return nil, fmt.Errorf("listen for artifacts on %s: %w", opts.ArtifactAddr, err)
	}
	base := runner.BaseURL(opts.ArtifactBaseURL, ln.Addr())
	metricsAddr := opts.MetricsAddr
	if metricsAddr == "" {
		metricsAddr = "0"
	}
	probeAddr := opts.ProbeAddr
	if probeAddr == "" {
		probeAddr = "0"
	}
	if err := sluicev1.ValidateShard(opts.Shard); err != nil {
		return nil, err
	}
	// Only this shard's objects are watched and held (the syncer moves a
	// relabelled Repository's objects with uncached reads, shard.go).
	sel := sluicev1.ShardSelector(opts.Shard)
	cacheOpts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&sluicev1.Repository{}:    {Label: sel},
		&sluicev1.Release{}:       {Label: sel},
		&sluicev1.ChangeRequest{}: {Label: sel},
		&sluicev1.Approval{}:      {Label: sel},
	}}
	if len(opts.Namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range opts.Namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	// Secrets are never cached: a Get through the manager's client would
	// otherwise start a list+watch of every Secret the syncer may see.
	// The syncer reads exactly the Secrets Repositories name, with direct
	// GETs, and its RBAC grants get (no list, no watch) in the namespaces
	// it serves only.
	clientOpts := client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
	scheme, err := sluicescheme.New()
	if err != nil {
		return nil, err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: metricsAddr},
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          opts.LeaderElection,
		LeaderElectionID:        sluicev1.ShardLeaseName(LeaderElectionID, opts.Shard),
		LeaderElectionNamespace: opts.LeaderElectionNamespace,
		Cache:                   cacheOpts,
		Client:                  clientOpts,
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("create manager: %w", err)
	}
	var reg prometheus.Registerer = ctrlmetrics.Registry
	if opts.Registry != nil {
		reg = opts.Registry
	}
	if opts.Shard != "" {
		// Every sluice_* series of a shard's syncer says which shard it
		// counts; the unsharded syncer's keep their labels as before.
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"shard": opts.Shard}, reg)
	}
	m, err := metrics.New(reg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	gitClient, err := git.NewGoGit(dirs["git"], git.URLPolicy{AllowFile: opts.AllowFileURLs}, m)
	if err != nil {
		ln.Close()
		return nil, err
	}
	store := &artifact.Store{Dir: dirs["artifacts"]}
	rec := &controller.RepositoryReconciler{
		Client:                  mgr.GetClient(),
		Git:                     gitClient,
		Validator:               opts.Validator,
		Store:                   store,
		ArtifactBaseURL:         base,
		Recorder:                mgr.GetEventRecorder(controller.ControllerName),
		Metrics:                 m,
		ScratchDir:              dirs["scratch"],
		Trigger:                 controller.NewTrigger(),
		MaxConcurrentReconciles: opts.Concurrency,
		SkipNameValidation:      opts.SkipNameValidation,
		ChartDigestRecheck:      opts.ChartDigestRecheck,
	}
	if err := rec.SetupWithManager(mgr); err != nil {
		ln.Close()
		return nil, fmt.Errorf("set up repository controller: %w", err)
	}
	srv := &http.Server{
		Handler:           &artifact.Server{Store: store, Rebuilder: rec, Token: opts.ArtifactToken, Log: ctrl.Log.WithName("artifacts")},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      5 * time.Minute,
	}
	if err := mgr.Add(&httpRunnable{srv: srv, ln: ln}); err != nil {
		ln.Close()
		return nil, err
	}
	if opts.Shard == "" && opts.LeaderElection && opts.LeaderElectionNamespace != "" {
		// The unsharded leader tells when a shard is down: a shard
		// cannot report its own absence.
		w, err := shardwatch.New(reg, shardwatch.Watch{
			Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), LeaseNamespace: opts.LeaderElectionNamespace,
			Leases:     map[string]string{"syncer": LeaderElectionID, "operator": sluicev1.OperatorLeaseName},
			Namespaces: opts.Namespaces, Interval: opts.ShardWatchInterval,
		})
		if err != nil {
			ln.Close()
			return nil, err
		}
		if err := mgr.Add(w); err != nil {
			ln.Close()
			return nil, err
		}
	}
	if probeAddr != "0" {
		if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
			return nil, err
		}
		if err := mgr.AddReadyzCheck("cache", func(req *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(req.Context()) {
				return errors.New("caches not synced")
			}
			return nil
		}); err != nil {
			return nil, err
		}
	}
	return &Syncer{Manager: mgr, Reconciler: rec, Git: gitClient, ArtifactURL: base, listener: ln}, nil
}

// Trigger is the reconcile-now channel: the webhook receiver calls
// Trigger().Request(namespace, name) after a verified push.
func (s *Syncer) Trigger() *controller.Trigger { return s.Reconciler.Trigger }

// Start runs until ctx ends.
func (s *Syncer) Start(ctx context.Context) error { return s.Manager.Start(ctx) }

// httpRunnable serves the artifact server on every replica.
type httpRunnable struct {
	srv *http.Server
	ln  net.Listener
}

func (h *httpRunnable) Start(ctx context.Context) error {
	errc := make(chan error, 1)
	go func() { errc <- h.srv.Serve(h.ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return h.srv.Shutdown(sctx)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("artifact server: %w", err)
	}
}

// NeedLeaderElection is false: every replica serves artifacts.
func (h *httpRunnable) NeedLeaderElection() bool { return false }
