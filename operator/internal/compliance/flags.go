package compliance

import (
	"context"
	"flag"
	"fmt"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	sluicescheme "github.com/sluice-gitops/sluice/operator/api/scheme"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// Flags are the operator's live compliance flags.
type Flags struct {
	// Enabled runs the scanner.
	Enabled bool
	// Interval is the time between full passes.
	Interval time.Duration
	// MaxResults bounds each Report's results.
	MaxResults int
	// Timeout bounds one object's evaluation.
	Timeout time.Duration
}

// Bind registers the flags.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.BoolVar(&f.Enabled, "compliance", true, "Evaluate the policy bundle over the live objects of every target namespace and keep an openreports.io Report in each (needs the Report CRD and the chart's compliance RBAC).")
	fs.DurationVar(&f.Interval, "compliance-interval", DefaultInterval, "Time between full compliance passes (every object evaluated again); changed objects are evaluated as they change.")
	fs.IntVar(&f.MaxResults, "compliance-max-results", DefaultMaxResults, "Most results kept in one namespace's Report (its summary counts all of them).")
	fs.DurationVar(&f.Timeout, "compliance-eval-timeout", DefaultEvalTimeout, "Longest evaluation of one object; a policy taking longer is an error result.")
}

// Register adds the scanner to the manager when enabled. It compiles the
// policy bundle the syncer's validator uses (Sluice's default policies and
// their data, policy.Options{} as validate.New gets it from the syncer),
// so a live result and a ChangeRequest's verdict come from the same rules
// and name the same policyBundleDigest.
func (f *Flags) Register(ctx context.Context, mgr manager.Manager, cfg *rest.Config) error {
	if !f.Enabled {
		return nil
	}
	s, err := New(ctx, mgr, cfg, Options{Interval: f.Interval, MaxResults: f.MaxResults, Timeout: f.Timeout})
	if err != nil {
		return err
	}
	return mgr.Add(s)
}

// New builds a Scanner on the manager's cache from o, filling what o leaves
// unset: the policy bundle (BundleOptions), a client for the Reports that
// does not cache them, the metrics (registered with controller-runtime's
// registry) and the logger.
func New(ctx context.Context, mgr manager.Manager, cfg *rest.Config, o Options) (*Scanner, error) {
	if o.Engine == nil {
		e, digest, err := LoadBundle(ctx, BundleOptions)
		if err != nil {
			return nil, err
		}
		o.Engine, o.BundleDigest = e, digest
	}
	if o.Client == nil {
		c, err := ReportClient(cfg)
		if err != nil {
			return nil, err
		}
		o.Client = c
	}
	if o.Metrics == nil {
		m := metrics.NewCompliance()
		if err := m.Register(ctrlmetrics.Registry); err != nil {
			return nil, err
		}
		o.Metrics = m
	}
	if o.Log.GetSink() == nil {
		o.Log = mgr.GetLogger().WithName("compliance")
	}
	o.Config, o.Cache = cfg, mgr.GetCache()
	return NewScanner(o)
}

// BundleOptions select the policy bundle live compliance evaluates: the
// syncer's, which validates every change with the default policies and
// data only.
var BundleOptions = policy.Options{}

// LoadBundle compiles a policy bundle and returns it with its digest.
func LoadBundle(ctx context.Context, opts policy.Options) (*policy.Engine, string, error) {
	e, err := policy.New(ctx, opts)
	if err != nil {
		return nil, "", fmt.Errorf("compliance: load the policy bundle: %w", err)
	}
	digest, err := policy.BundleDigest(opts)
	if err != nil {
		return nil, "", fmt.Errorf("compliance: digest the policy bundle: %w", err)
	}
	return e, digest, nil
}

// ReportClient is a client that reads and writes Reports directly (never
// from a cache: the scanner keeps the last Report it wrote itself).
func ReportClient(cfg *rest.Config) (client.WithWatch, error) {
	s, err := sluicescheme.New(openreports.AddToScheme)
	if err != nil {
		return nil, err
	}
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: s})
	if err != nil {
		return nil, fmt.Errorf("compliance: Report client: %w", err)
	}
	return c, nil
}
