package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kitmetrics "github.com/sluice-gitops/sluice/kit/metrics"
)

// Result label values of sluice_drift_checks_total and
// sluice_drift_check_duration_seconds.
const (
	DriftClean   = "clean"
	DriftFound   = "drifted"
	DriftError   = "error"
	DriftSkipped = "skipped"
)

// DriftRecorder records the drift controller's metrics. A nil *DriftRecorder
// records nothing.
type DriftRecorder struct {
	drifted  *prometheus.GaugeVec
	duration *prometheus.HistogramVec
	checks   *prometheus.CounterVec
}

// NewDrift creates the drift metrics.
func NewDrift() *DriftRecorder {
	return &DriftRecorder{
		drifted: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "sluice_release_drifted",
			Help: "1 while a Release's live state differs from its last applied change, 0 when it matches (releases with drift detection on).",
		}, []string{"namespace", "release"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_drift_check_duration_seconds",
			Help:    "Duration of one release's drift check, by result (clean, drifted, error).",
			Buckets: prometheus.ExponentialBuckets(0.005, 3, 10), // 5ms … ~100s
		}, []string{"result"}),
		checks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_drift_checks_total",
			Help: "Drift checks by result (clean, drifted, error, skipped).",
		}, []string{"result"}),
	}
}

// Register registers the drift metrics with reg, replacing collectors of
// the same name from an earlier recorder.
func (r *DriftRecorder) Register(reg prometheus.Registerer) error {
	return kitmetrics.Register(reg, r.drifted, r.duration, r.checks)
}

// Check records one check's result and duration, and the release's
// drifted gauge (clean and drifted results only).
func (r *DriftRecorder) Check(ns, release, result string, d time.Duration) {
	if r == nil {
		return
	}
	r.checks.WithLabelValues(result).Inc()
	if result == DriftSkipped {
		return
	}
	r.duration.WithLabelValues(result).Observe(d.Seconds())
	switch result {
	case DriftClean:
		r.drifted.WithLabelValues(ns, release).Set(0)
	case DriftFound:
		r.drifted.WithLabelValues(ns, release).Set(1)
	}
}

// Forget drops a release's gauge (drift detection off, or the release gone).
func (r *DriftRecorder) Forget(ns, release string) {
	if r == nil {
		return
	}
	r.drifted.DeleteLabelValues(ns, release)
}
