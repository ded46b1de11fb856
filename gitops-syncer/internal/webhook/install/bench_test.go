package install_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// BenchmarkPushWebhookToChangeRequests measures the time from a signed push
// webhook (a Helm-only change of the cart service) to both of its
// ChangeRequests existing, through a running syncer with a real git
// repository, and reports p50, p95 and max in milliseconds. Run with
// -benchtime=30x (or more) for at least 30 pushes.
func BenchmarkPushWebhookToChangeRequests(b *testing.B) {
	w := newWorld(b)
	ctx := context.Background()
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		sha := w.merge(map[string]string{prodValues: fmt.Sprintf("replicaCount: %d\n", 10+i)})
		body := w.pushBody(sha)
		names := []string{sluicev1.ChangeRequestName("cart-prod", sha, 1), sluicev1.ChangeRequestName("cart-staging", sha, 1)}
		b.StartTimer()
		start := time.Now()
		if code := w.send("push", body); code != http.StatusAccepted {
			b.Fatalf("push webhook answered %d", code)
		}
		for _, name := range names {
			for {
				err := k8s.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &sluicev1.ChangeRequest{})
				if err == nil {
					break
				}
				if client.IgnoreNotFound(err) != nil {
					b.Fatal(err)
				}
				time.Sleep(2 * time.Millisecond)
			}
		}
		lat = append(lat, time.Since(start))
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) float64 {
		idx := int(float64(len(lat))*p+0.5) - 1
		if idx < 0 {
			idx = 0
		}
		if idx >= len(lat) {
			idx = len(lat) - 1
		}
		return float64(lat[idx].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.95), "p95-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(len(lat)), "pushes")
}
