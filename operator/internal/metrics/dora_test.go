package metrics

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func changeOf(release string) *sluicev1.ChangeRequest {
	return &sluicev1.ChangeRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Labels: map[string]string{sluicev1.LabelRepository: "infra"}},
		Spec: sluicev1.ChangeRequestSpec{Release: release}}
}

// The change failure rate's counters and the time to restore, by release,
// read back from the registry.
func TestDORA_readFromTheRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(nil)
	if err := r.dora.register(reg); err != nil {
		t.Fatal(err)
	}
	for range 4 {
		r.ChangeApplied(changeOf("web-prod"))
	}
	r.ChangeApplied(changeOf("api-prod"))
	r.VerificationFailed(changeOf("web-prod"))
	r.Restored(changeOf("web-prod"), 90*time.Second)

	applied := testutil.ToFloat64(r.dora.applied.WithLabelValues("team", "infra", "web-prod"))
	failed := testutil.ToFloat64(r.dora.failed.WithLabelValues("team", "infra", "web-prod"))
	if applied != 4 || failed != 1 || failed/applied != 0.25 {
		t.Fatalf("web-prod: %v applied, %v failed", applied, failed)
	}
	if got := testutil.ToFloat64(r.dora.applied.WithLabelValues("team", "infra", "api-prod")); got != 1 {
		t.Fatalf("api-prod applied = %v", got)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != "sluice_time_to_restore_seconds" {
			continue
		}
		h := f.GetMetric()[0].GetHistogram()
		if h.GetSampleCount() != 1 || h.GetSampleSum() != 90 {
			t.Fatalf("time to restore = %d samples, sum %v", h.GetSampleCount(), h.GetSampleSum())
		}
		return
	}
	t.Fatal("sluice_time_to_restore_seconds is not in the registry")
}
