package install_test

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// stagingValues is the cart service's staging values file: a push that
// changes only values-prod.yaml makes no staging ChangeRequest (a change is
// made per release whose inputs changed).
const stagingValues = "services/cart/values-staging.yaml"

// benchWait bounds each wait of the benchmark: past it the benchmark fails
// with what it was waiting for instead of hanging until the test timeout.
const benchWait = 2 * time.Minute

// BenchmarkPushWebhookToChangeRequests measures the time from a signed push
// webhook (a Helm-only change of both environments of the cart service) to
// both of its ChangeRequests existing, through a running syncer with a
// real git repository, and reports p50, p95 and max in milliseconds. Run
// with -benchtime=30x (or more) for at least 30 pushes. The ChangeRequests
// are awaited with a watch: polling the API server every few milliseconds
// would load the machine the syncer runs on.
func BenchmarkPushWebhookToChangeRequests(b *testing.B) {
	w := newWorld(b)
	watcher, err := client.NewWithWatch(env.Config, client.Options{Scheme: k8s.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		sha := w.merge(map[string]string{
			prodValues:    fmt.Sprintf("replicaCount: %d\n", 10+i),
			stagingValues: fmt.Sprintf("replicaCount: %d\n", 2+i),
		})
		body := w.pushBody(sha)
		names := []string{sluicev1.ChangeRequestName("cart-prod", sha, 1), sluicev1.ChangeRequestName("cart-staging", sha, 1)}
		// The watch starts from the API server's watch cache (resource
		// version "0"): a watch asking for the latest state would make
		// the cache request progress from etcd, and the syncer's own
		// fresh lists of ChangeRequests just after would wait for its
		// next request, up to 100 ms: the benchmark would time its own
		// probe. Objects the cache replays are older ChangeRequests,
		// never the names waited for.
		ch, err := watcher.Watch(context.Background(), &sluicev1.ChangeRequestList{}, client.InNamespace(w.ns),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		if code := w.send("push", body); code != http.StatusAccepted {
			ch.Stop()
			b.Fatalf("push webhook answered %d", code)
		}
		if missing := waitCreated(ch, names, benchWait); len(missing) > 0 {
			b.Fatalf("push %d (%s): ChangeRequests %v did not appear within %s of the webhook", i+1, sha, missing, benchWait)
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

// waitCreated reads w until every named object was added or limit passed,
// stops w, and returns the names that never came.
func waitCreated(w watch.Interface, names []string, limit time.Duration) []string {
	defer w.Stop()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	timeout := time.After(limit)
	for len(want) > 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return append(keys(want), "(the watch ended)")
			}
			if cr, isCR := ev.Object.(*sluicev1.ChangeRequest); isCR && ev.Type == watch.Added {
				delete(want, cr.Name)
			}
		case <-timeout:
			return keys(want)
		}
	}
	return nil
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
