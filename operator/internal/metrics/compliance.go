package metrics

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kitmetrics "github.com/sluice-gitops/sluice/kit/metrics"
)

// PolicyResult is one series of sluice_compliance_results: a policy
// ("namespace/rule") and a result (fail, warn, error).
type PolicyResult struct {
	Policy, Result string
}

// ComplianceRecorder records live compliance's metrics. A nil
// *ComplianceRecorder records nothing.
type ComplianceRecorder struct {
	results  *prometheus.GaugeVec
	passes   *prometheus.CounterVec
	objects  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	writes   *prometheus.CounterVec

	mu sync.Mutex
	// series are the result series set per namespace, so a policy that
	// no longer fails loses its series instead of keeping its last value.
	series map[string]map[PolicyResult]bool
}

// NewCompliance creates the compliance metrics.
func NewCompliance() *ComplianceRecorder {
	return &ComplianceRecorder{
		results: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_compliance_results",
			Help: "Live objects' policy results by target namespace, policy and result (fail, warn, error), as of the last compliance pass; every result counted, whatever the Report's limits.",
		}, []string{"namespace", "policy", "result"}),
		passes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_compliance_passes_total",
			Help: "Compliance passes of a target namespace, by type (full: every object evaluated again; changes: only changed objects).",
		}, []string{"type"}),
		objects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_compliance_objects_evaluated_total",
			Help: "Live objects evaluated by compliance passes, by type.",
		}, []string{"type"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_compliance_pass_duration_seconds",
			Help:    "Duration of one target namespace's compliance pass, by type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 3, 12), // 1ms … ~3min
		}, []string{"type"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_compliance_report_writes_total",
			Help: "Report creates and updates by namespace (a pass with nothing changed writes nothing).",
		}, []string{"namespace"}),
		series: map[string]map[PolicyResult]bool{},
	}
}

// Register registers the compliance metrics with reg, replacing collectors
// of the same name from an earlier recorder.
func (r *ComplianceRecorder) Register(reg prometheus.Registerer) error {
	return kitmetrics.Register(reg, r.results, r.passes, r.objects, r.duration, r.writes)
}

// Pass records one namespace's pass: its type, the objects it evaluated,
// its duration and the results by policy.
func (r *ComplianceRecorder) Pass(ns string, full bool, evaluated int, d time.Duration, results map[PolicyResult]int) {
	if r == nil {
		return
	}
	typ := "changes"
	if full {
		typ = "full"
	}
	r.passes.WithLabelValues(typ).Inc()
	r.objects.WithLabelValues(typ).Add(float64(evaluated))
	r.duration.WithLabelValues(typ).Observe(d.Seconds())
	r.mu.Lock()
	defer r.mu.Unlock()
	for pr := range r.series[ns] {
		if _, ok := results[pr]; !ok {
			r.results.DeleteLabelValues(ns, pr.Policy, pr.Result)
		}
	}
	set := make(map[PolicyResult]bool, len(results))
	for pr, n := range results {
		r.results.WithLabelValues(ns, pr.Policy, pr.Result).Set(float64(n))
		set[pr] = true
	}
	r.series[ns] = set
}

// Write records a Report write in ns.
func (r *ComplianceRecorder) Write(ns string) {
	if r == nil {
		return
	}
	r.writes.WithLabelValues(ns).Inc()
}

// Forget drops the series of a namespace that is no longer a target.
func (r *ComplianceRecorder) Forget(ns string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.results.DeletePartialMatch(prometheus.Labels{"namespace": ns})
	r.writes.DeleteLabelValues(ns)
	delete(r.series, ns)
}
