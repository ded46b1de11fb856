package controller

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	sluicescheme "github.com/sluice-gitops/sluice/operator/api/scheme"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// ManagerOptions configure the operator's manager.
type ManagerOptions struct {
	Options
	// MetricsAddr serves /metrics ("0" disables).
	MetricsAddr string
	// ProbeAddr serves /healthz and /readyz.
	ProbeAddr string
	// PprofAddr serves pprof; it must be a loopback or private address
	// ("0" or empty disables).
	PprofAddr string
	// LeaderElection turns leader election on, with a Lease named
	// LeaderElectionID in LeaderElectionNamespace.
	LeaderElection          bool
	LeaderElectionID        string
	LeaderElectionNamespace string
	// LeaseDuration, RenewDeadline and RetryPeriod tune leader election;
	// the defaults (60s, 40s, 5s) ride out a short API server outage
	// without losing the lease.
	LeaseDuration time.Duration
	RenewDeadline time.Duration
	RetryPeriod   time.Duration
	// Namespaces restricts the cache (and so the operator) to these
	// namespaces; empty watches all.
	Namespaces []string
}

// ShardCache is the cache's per-kind configuration for shard key: the
// Sluice kinds a Repository's work is made of, selected by the shard label
// (sluicev1.ShardSelector), so a replica neither watches nor holds another
// shard's objects. ApprovalPolicies and Persons are platform-wide and
// cached whole.
func ShardCache(key string) map[client.Object]cache.ByObject {
	sel := sluicev1.ShardSelector(key)
	return map[client.Object]cache.ByObject{
		&sluicev1.Repository{}:    {Label: sel},
		&sluicev1.Release{}:       {Label: sel},
		&sluicev1.ChangeRequest{}: {Label: sel},
		&sluicev1.Approval{}:      {Label: sel},
	}
}

// NewScheme returns a scheme with the client-go and Sluice kinds.
func NewScheme() (*runtime.Scheme, error) { return sluicescheme.New() }

// DefaultLeaderElectionID is the Lease of the operator's leader election.
const DefaultLeaderElectionID = sluicev1.OperatorLeaseName

// CheckInternalAddr refuses a listen address that is not loopback or
// private (pprof must never face the outside).
func CheckInternalAddr(addr string) error {
	if addr == "" || addr == "0" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("pprof address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !(ip.IsLoopback() || ip.IsPrivate()) {
		return fmt.Errorf("pprof address %q must be a loopback or private IP address (such as 127.0.0.1:6060)", addr)
	}
	return nil
}

// NewManager builds the operator's manager: metrics, health probes, pprof,
// leader election, the sluice_* metrics and both reconcilers.
func NewManager(ctx context.Context, cfg *rest.Config, o ManagerOptions) (ctrl.Manager, error) {
	if err := CheckInternalAddr(o.PprofAddr); err != nil {
		return nil, err
	}
	if o.PprofAddr == "" {
		o.PprofAddr = "0"
	}
	orDefault := func(d, def time.Duration) *time.Duration {
		if d <= 0 {
			d = def
		}
		return &d
	}
	id := o.LeaderElectionID
	if id == "" {
		id = DefaultLeaderElectionID
	}
	// Each shard elects its own leader; its Lease's renewals are also how
	// the shard is seen to be up (ShardAvailable).
	id = sluicev1.ShardLeaseName(id, o.Shard)
	// managedFields are never read by the operator and are a large part
	// of every cached object.
	// Pods: every namespace, label-selected and slimmed (health.go).
	if err := sluicev1.ValidateShard(o.Shard); err != nil {
		return nil, err
	}
	cacheOpts := cache.Options{DefaultTransform: cache.TransformStripManagedFields(), ByObject: ShardCache(o.Shard)}
	cacheOpts.ByObject[&corev1.Pod{}] = PodCache()
	if len(o.Namespaces) > 0 {
		cacheOpts.DefaultNamespaces = map[string]cache.Config{}
		for _, ns := range o.Namespaces {
			cacheOpts.DefaultNamespaces[ns] = cache.Config{}
		}
	}
	scheme, err := NewScheme()
	if err != nil {
		return nil, err
	}
	// Secrets are never cached: the operator's state server reads one
	// release's state Secret at a time with direct GETs, and its RBAC
	// grants no list or watch of Secrets.
	clientOpts := client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                        scheme,
		Cache:                         cacheOpts,
		NewCache:                      newKindsCache,
		Client:                        clientOpts,
		Metrics:                       metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:        o.ProbeAddr,
		PprofBindAddress:              o.PprofAddr,
		LeaderElection:                o.LeaderElection,
		LeaderElectionID:              id,
		LeaderElectionNamespace:       o.LeaderElectionNamespace,
		LeaderElectionReleaseOnCancel: true,
		LeaseDuration:                 orDefault(o.LeaseDuration, 60*time.Second),
		RenewDeadline:                 orDefault(o.RenewDeadline, 40*time.Second),
		RetryPeriod:                   orDefault(o.RetryPeriod, 5*time.Second),
	})
	if err != nil {
		return nil, fmt.Errorf("create manager: %w", err)
	}
	if o.ProbeAddr != "" && o.ProbeAddr != "0" {
		if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
			return nil, fmt.Errorf("add healthz check: %w", err)
		}
		if err := mgr.AddReadyzCheck("readyz", func(req *http.Request) error {
			if !mgr.GetCache().WaitForCacheSync(req.Context()) {
				return fmt.Errorf("cache not synced")
			}
			return nil
		}); err != nil {
			return nil, fmt.Errorf("add readyz check: %w", err)
		}
	}
	if o.Metrics == nil {
		o.Metrics = metrics.New(mgr.GetCache())
		var reg prometheus.Registerer = ctrlmetrics.Registry
		if o.Shard != "" {
			// Every sluice_* series of a shard says which shard it
			// counts; the unsharded operator's keep their labels as
			// before.
			reg = prometheus.WrapRegistererWith(prometheus.Labels{"shard": o.Shard}, reg)
		}
		if err := o.Metrics.Register(reg); err != nil {
			return nil, err
		}
	}
	if err := Setup(ctx, mgr, o.Options); err != nil {
		return nil, err
	}
	return mgr, nil
}
