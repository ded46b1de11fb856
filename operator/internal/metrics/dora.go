package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kitmetrics "github.com/sluice-gitops/sluice/kit/metrics"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// DORA's change failure rate and time to restore, from verification
// after apply. The change failure rate of a release is
//
//	sluice_release_changes_verification_failed_total / sluice_release_changes_applied_total
//
// (sum by repository for a repository's), and time to restore is a
// histogram from a release's failed verification to the next change of
// that release that was verified.

// dora holds the DORA metrics by release.
type dora struct {
	applied *prometheus.CounterVec
	failed  *prometheus.CounterVec
	restore *prometheus.HistogramVec
}

func newDORA() *dora {
	labels := []string{"namespace", "repository", "release"}
	return &dora{
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_release_changes_applied_total",
			Help: "Changes applied, by release (the denominator of the change failure rate).",
		}, labels),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_release_changes_verification_failed_total",
			Help: "Applied changes whose verification failed, by release (the numerator of the change failure rate).",
		}, labels),
		restore: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_time_to_restore_seconds",
			Help:    "Time to restore: from a release's failed verification to the next change of that release that was verified.",
			Buckets: prometheus.ExponentialBuckets(30, 2, 12), // 30s … ~17h
		}, []string{"namespace", "repository"}),
	}
}

func (d *dora) register(reg prometheus.Registerer) error {
	return kitmetrics.Register(reg, d.applied, d.failed, d.restore)
}

func releaseLabels(cr *sluicev1.ChangeRequest) []string {
	return []string{cr.Namespace, cr.Labels[sluicev1.LabelRepository], cr.Spec.Release}
}

// ChangeApplied counts a change of cr's release applied.
func (r *Recorder) ChangeApplied(cr *sluicev1.ChangeRequest) {
	if r == nil {
		return
	}
	r.dora.applied.WithLabelValues(releaseLabels(cr)...).Inc()
}

// VerificationFailed counts a change of cr's release whose verification
// failed.
func (r *Recorder) VerificationFailed(cr *sluicev1.ChangeRequest) {
	if r == nil {
		return
	}
	r.dora.failed.WithLabelValues(releaseLabels(cr)...).Inc()
}

// Restored observes the time to restore of cr's release: restore is the
// time from its last failed verification to cr's passing one.
func (r *Recorder) Restored(cr *sluicev1.ChangeRequest, restore time.Duration) {
	if r == nil {
		return
	}
	r.dora.restore.WithLabelValues(cr.Namespace, cr.Labels[sluicev1.LabelRepository]).Observe(restore.Seconds())
}
