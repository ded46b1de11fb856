// Package metrics defines the syncer's sluice_* Prometheus metrics
// (DESIGN.md §7), registered with controller-runtime's registry.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metrics are the syncer's metrics.
type Metrics struct {
	GitFetchDuration      *prometheus.HistogramVec
	GitLsRemoteDuration   *prometheus.HistogramVec
	ChangeRequestsCreated *prometheus.CounterVec
	ValidationDuration    *prometheus.HistogramVec
}

// New creates the metrics and registers them with reg (nil: controller-
// runtime's global registry, served on the manager's metrics endpoint).
func New(reg prometheus.Registerer) *Metrics {
	if reg == nil {
		reg = crmetrics.Registry
	}
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
	m.GitFetchDuration = register(reg, m.GitFetchDuration)
	m.GitLsRemoteDuration = register(reg, m.GitLsRemoteDuration)
	m.ChangeRequestsCreated = register(reg, m.ChangeRequestsCreated)
	m.ValidationDuration = register(reg, m.ValidationDuration)
	return m
}

// register registers c, or returns the collector already registered under
// its name (several managers in one test process share them).
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
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
