package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	kitmetrics "github.com/sluice-gitops/sluice/kit/metrics"
)

// Metrics are the webhook receiver's sluice_* metrics (DESIGN.md §7).
type Metrics struct {
	// Requests counts deliveries by provider, event and result.
	Requests *prometheus.CounterVec
	// PushToChangeRequest is the time from a verified push delivery to the
	// first ChangeRequest of the pushed commit existing.
	PushToChangeRequest prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg (nil:
// controller-runtime's registry, served on the manager's metrics endpoint),
// replacing those of an earlier receiver (kit/metrics.Register). The
// metrics are usable even when registering fails.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "sluice_webhook_requests_total",
			Help: "Webhook deliveries by provider, event and result (accepted, ignored, duplicate, unauthorized, too_large, bad_request, not_found, unavailable).",
		}, []string{"provider", "event", "result"}),
		PushToChangeRequest: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "sluice_webhook_push_to_changerequest_seconds",
			Help:    "Time from a verified push webhook to the first ChangeRequest of the pushed commit.",
			Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
		}),
	}
	return m, kitmetrics.Register(reg, m.Requests, m.PushToChangeRequest)
}
