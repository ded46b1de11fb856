// Package metrics defines the syncer's sluice_* Prometheus metrics
// (DESIGN.md §7), registered with controller-runtime's registry.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	kitmetrics "github.com/sluice-gitops/sluice/kit/metrics"
)

// Metrics are the syncer's metrics.
type Metrics struct {
	GitFetchDuration      *prometheus.HistogramVec
	GitLsRemoteDuration   *prometheus.HistogramVec
	ChangeRequestsCreated *prometheus.CounterVec
	ValidationDuration    *prometheus.HistogramVec
}

// New creates the metrics and registers them with reg (nil: controller-
// runtime's global registry, served on the manager's metrics endpoint),
// replacing those of an earlier syncer (kit/metrics.Register). The metrics
// are usable even when registering fails.
func New(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		GitFetchDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_git_fetch_duration_seconds",
			Help:    "Duration of git fetches by result (success or the failure reason).",
			Buckets: prometheus.ExponentialBuckets(0.01, 2, 14),
		}, []string{"result"}),
		GitLsRemoteDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_git_ls_remote_duration_seconds",
			Help:    "Duration of remote head checks (ls-remote) by result.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}, []string{"result"}),
		ChangeRequestsCreated: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_changerequests_created_total",
			Help: "ChangeRequests created by the syncer, by verdict result (pass, warn, fail).",
		}, []string{"result"}),
		ValidationDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_validation_duration_seconds",
			Help:    "Duration of one release's validation (render, checks, plan) by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}, []string{"result"}),
	}
	return m, kitmetrics.Register(reg, m.GitFetchDuration, m.GitLsRemoteDuration, m.ChangeRequestsCreated, m.ValidationDuration)
}

// ObserveGit implements git.Observer.
func (m *Metrics) ObserveGit(op string, d time.Duration, result string) {
	switch op {
	case "fetch":
		m.GitFetchDuration.WithLabelValues(result).Observe(d.Seconds())
	case "ls-remote":
		m.GitLsRemoteDuration.WithLabelValues(result).Observe(d.Seconds())
	}
}
