// Package metrics registers the Prometheus collectors of every Sluice
// component with one policy.
package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Register registers each collector with reg. A collector already
// registered under the same description (by an earlier instance of the
// component in this process: a manager started again, another syncer in
// the same test binary) is replaced, so the registry always reports the
// running instance and never counts an old one's work as its own. A clash
// of another kind (the same name with other labels or help) is an error
// naming the collector; the collectors stay usable either way. A nil reg
// is controller-runtime's registry, which the manager serves on /metrics.
func Register(reg prometheus.Registerer, collectors ...prometheus.Collector) error {
	if reg == nil {
		reg = crmetrics.Registry
	}
	for _, c := range collectors {
		err := reg.Register(c)
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			reg.Unregister(already.ExistingCollector)
			err = reg.Register(c)
		}
		if err != nil {
			return fmt.Errorf("register metrics: %w", err)
		}
	}
	return nil
}
