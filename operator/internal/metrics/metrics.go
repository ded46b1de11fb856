// Package metrics holds the operator's sluice_* Prometheus metrics: changes
// by phase, phase transitions, approval wait, apply duration by applier and
// result, and DORA figures (lead time, changes applied and failed, and
// from verification the change failure rate and time to restore by
// release, dora.go).
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kitmetrics "github.com/sluice-gitops/sluice/kit/metrics"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Result label values of sluice_apply_duration_seconds.
const (
	ResultApplied = "applied"
	ResultFailed  = "failed"
	ResultRetry   = "retry"
)

// Recorder records the operator's metrics. The zero value is not usable;
// use New. A nil *Recorder records nothing.
type Recorder struct {
	transitions   *prometheus.CounterVec
	approvalWait  prometheus.Histogram
	applyDuration *prometheus.HistogramVec
	leadTime      prometheus.Histogram
	applied       *prometheus.CounterVec
	failed        *prometheus.CounterVec
	phases        *phaseCollector
	dora          *dora
}

// New creates the metrics. reader (usually the manager's cached client)
// backs the sluice_changerequests gauge, counted on each scrape.
func New(reader client.Reader) *Recorder {
	return &Recorder{
		transitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_changerequest_transitions_total",
			Help: "ChangeRequest phase transitions, by the phase entered.",
		}, []string{"phase"}),
		approvalWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_approval_wait_seconds",
			Help:    "Time from a ChangeRequest's creation until it passed the gate.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10), // 1s … ~3 days
		}),
		applyDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "sluice_apply_duration_seconds",
			Help:    "Duration of applier calls, by applier and result (applied, failed, retry).",
			Buckets: prometheus.ExponentialBuckets(0.05, 3, 10), // 50ms … ~16min
		}, []string{"applier", "result"}),
		leadTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_change_lead_time_seconds",
			Help:    "Lead time for changes: from a ChangeRequest's creation (the commit reaching Sluice) until it was applied.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		applied: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_changes_applied_total",
			Help: "Changes applied, by applier (deployment frequency).",
		}, []string{"applier"}),
		failed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_changes_failed_total",
			Help: "Changes whose apply failed, by applier (change failure rate with sluice_changes_applied_total).",
		}, []string{"applier"}),
		dora: newDORA(),
		phases: &phaseCollector{
			reader: reader,
			desc:   prometheus.NewDesc("sluice_changerequests", "ChangeRequests by namespace and phase.", []string{"namespace", "phase"}, nil),
		},
	}
}

// Register registers every metric with reg (controller-runtime's
// metrics.Registry in the operator). A collector of the same name from an
// earlier Recorder (a manager started again in the same process) is
// replaced, so the metrics always describe the running manager.
func (r *Recorder) Register(reg prometheus.Registerer) error {
	if err := kitmetrics.Register(reg, r.transitions, r.approvalWait, r.applyDuration, r.leadTime, r.applied, r.failed, r.phases); err != nil {
		return err
	}
	return r.dora.register(reg)
}

// Transition counts a phase change.
func (r *Recorder) Transition(phase sluicev1.ChangeRequestPhase) {
	if r == nil {
		return
	}
	r.transitions.WithLabelValues(string(phase)).Inc()
}

// ApprovalWait observes how long a change waited at the gate.
func (r *Recorder) ApprovalWait(d time.Duration) {
	if r == nil {
		return
	}
	r.approvalWait.Observe(d.Seconds())
}

// Apply observes one applier call; for ResultApplied it also records the
// lead time since the change was created.
func (r *Recorder) Apply(applierName, result string, d, leadTime time.Duration) {
	if r == nil {
		return
	}
	r.applyDuration.WithLabelValues(applierName, result).Observe(d.Seconds())
	switch result {
	case ResultApplied:
		r.applied.WithLabelValues(applierName).Inc()
		r.leadTime.Observe(leadTime.Seconds())
	case ResultFailed:
		r.failed.WithLabelValues(applierName).Inc()
	}
}

// phaseCollector counts ChangeRequests by phase from the cache on each
// scrape, so the gauge is always right after restarts and deletions.
type phaseCollector struct {
	reader client.Reader
	desc   *prometheus.Desc
}

func (c *phaseCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *phaseCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var list sluicev1.ChangeRequestList
	if err := c.reader.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	type key struct{ ns, phase string }
	counts := map[key]int{}
	for i := range list.Items {
		p := list.Items[i].Status.Phase
		if p == "" {
			p = sluicev1.PhasePending
		}
		counts[key{list.Items[i].Namespace, string(p)}]++
	}
	for k, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), k.ns, k.phase)
	}
}
