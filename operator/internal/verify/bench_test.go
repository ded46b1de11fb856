package verify

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// BenchmarkVerificationPass is issue 23's figure: one verification pass
// over 100 releases with 3 metric checks each, every check due, against
// the real Prometheus TestMain started (scraping the good and the bad
// test app). It reports the CPU of this process per pass (the Prometheus
// client and judging; the reconciler's status writes are not in it) and
// the query requests Prometheus counted per pass (its own
// prometheus_http_requests_total for /api/v1/query).
func BenchmarkVerificationPass(b *testing.B) {
	const releases, checks = 100, 3
	queries := []string{errorRateQuery,
		`sum(rate(app_http_requests_total{namespace="{{ .Namespace }}"}[1m]))`,
		`max(app_http_requests_total{namespace="{{ .Namespace }}",code="200"}) > bool 0`}
	spec := &sluicev1.VerificationSpec{PrometheusURL: promURL}
	for i := 0; i < checks; i++ {
		spec.Checks = append(spec.Checks, sluicev1.MetricCheck{Name: fmt.Sprintf("c%d", i), Query: queries[i], SuccessCondition: "result < 1e12",
			Interval: &metav1.Duration{Duration: time.Millisecond}, Count: 100})
	}
	p := &Prometheus{Timeout: 10 * time.Second}
	statuses := make([]*sluicev1.VerificationStatus, releases)
	for i := range statuses {
		statuses[i] = &sluicev1.VerificationStatus{}
	}
	before, err := queryRequests()
	if err != nil {
		b.Fatal(err)
	}
	if b.N > 100 {
		b.Fatalf("at most 100 passes (each check is measured 100 times), not %d: use -benchtime Nx", b.N)
	}
	cpu0 := processCPU()
	b.ResetTimer()
	for n := 0; n < b.N; n++ {
		// Each check is due again after its 1ms interval: every pass
		// measures all 300, at the real time (Prometheus has no data
		// in the future).
		now := time.Now()
		for i, st := range statuses {
			ns := []string{"good", "bad"}[i%2]
			d := Advance(context.Background(), p, spec, st, sluicev1.QueryData{Release: "web-" + ns, Namespace: ns}, now)
			if d.Outcome == Failed || d.Outcome == Inconclusive {
				b.Fatalf("release %d: %+v", i, d)
			}
		}
	}
	b.StopTimer()
	cpu := processCPU() - cpu0
	after, err := queryRequests()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/pass")
	b.ReportMetric((after-before)/float64(b.N), "prom-requests/pass")
}

// queryRequests is how many instant-query requests Prometheus served,
// from its own /metrics (which it does not scrape here).
func queryRequests() (float64, error) {
	resp, err := http.Get(promURL + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	var total float64
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, "prometheus_http_requests_total{") || !strings.Contains(line, `handler="/api/v1/query"`) {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			return 0, fmt.Errorf("read %q: %w", line, err)
		}
		total += v
	}
	return total, nil
}

// processCPU is the user and system CPU this process used so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
