package verify

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/verify/promtest"
)

// promURL is the real Prometheus TestMain started, scraping a good and a
// bad version of the test app every second.
var promURL string

// errorRateQuery is the check the issue names: the share of requests
// answered 500 over the last minute, for the release's namespace.
const errorRateQuery = `sum(increase(app_http_requests_total{namespace="{{ .Namespace }}",code="500"}[1m])) / sum(increase(app_http_requests_total{namespace="{{ .Namespace }}"}[1m]))`

// app is a small test service: each scrape of /metrics counts 1000 more
// requests, errorRate of them answered 500.
type app struct {
	errorRate float64
	mu        sync.Mutex
	requests  float64
}

func (a *app) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	a.mu.Lock()
	a.requests += 1000
	ok, bad := a.requests*(1-a.errorRate), a.requests*a.errorRate
	a.mu.Unlock()
	fmt.Fprintf(w, "# TYPE app_http_requests_total counter\napp_http_requests_total{code=\"200\"} %g\napp_http_requests_total{code=\"500\"} %g\n", ok, bad)
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

// run starts the apps and Prometheus, runs the tests and stops them.
func run(m *testing.M) int {
	good := httptest.NewServer(&app{errorRate: 0})
	defer good.Close()
	bad := httptest.NewServer(&app{errorRate: 0.05})
	defer bad.Close()
	prom, err := promtest.Start(map[string]string{"good": good.Listener.Addr().String(), "bad": bad.Listener.Addr().String()})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer prom.Stop()
	promURL = prom.URL
	return m.Run()
}

func errorRateCheck() sluicev1.MetricCheck {
	return sluicev1.MetricCheck{Name: "error-rate", Query: errorRateQuery, SuccessCondition: "result < 0.005",
		Interval: &metav1.Duration{Duration: time.Second}, Count: 3}
}

// verifyAgainst runs Advance to its end against the real Prometheus for a
// release in namespace, on a clock moved by each decision's After.
func verifyAgainst(t *testing.T, namespace string) (Decision, *sluicev1.VerificationStatus) {
	t.Helper()
	spec := &sluicev1.VerificationSpec{PrometheusURL: promURL, Checks: []sluicev1.MetricCheck{errorRateCheck()}}
	st := &sluicev1.VerificationStatus{StartedAt: metav1.Now()}
	data := sluicev1.QueryData{Release: "web-" + namespace, Namespace: namespace, Revision: strings.Repeat("a", 40)}
	now := time.Now()
	d := Advance(context.Background(), &Prometheus{}, spec, st, data, now)
	for d.Outcome == Pending {
		now = now.Add(d.After)
		d = Advance(context.Background(), &Prometheus{}, spec, st, data, now)
	}
	return d, st
}

// A bad version with 5% errors fails "error rate < 0.5%" at its first
// measurement; the evidence is the value Prometheus returned.
func TestAdvance_realPrometheus_badVersionFails(t *testing.T) {
	d, st := verifyAgainst(t, "bad")
	if d.Outcome != Failed || d.Reason != sluicev1.ReasonChecksFailed {
		t.Fatalf("decision = %+v, want Failed", d)
	}
	if len(st.Measurements) != 1 || !near(st.Measurements[0].Value, 0.05) || st.Measurements[0].Phase != sluicev1.MeasurementFailed ||
		!strings.Contains(st.Measurements[0].Query, `namespace="bad"`) {
		t.Fatalf("measurements = %+v", st.Measurements)
	}
}

// A good version passes all three measurements and is verified.
func TestAdvance_realPrometheus_goodVersionPasses(t *testing.T) {
	d, st := verifyAgainst(t, "good")
	if d.Outcome != Passed {
		t.Fatalf("decision = %+v, want Passed", d)
	}
	if len(st.Measurements) != 3 || st.Checks[0].Measured != 3 || st.Checks[0].Failed != 0 || st.Measurements[2].Value != "0" {
		t.Fatalf("status = %+v", st)
	}
}

// Bad input never passes silently: each case has its documented outcome.
func TestMeasure_realPrometheus_badInput(t *testing.T) {
	tests := map[string]struct {
		query   string
		noData  sluicev1.NoDataPolicy
		phase   sluicev1.MeasurementPhase
		message string
	}{
		"no series, noData fail":         {`app_missing_metric`, "", sluicev1.MeasurementFailed, "no series"},
		"no series, noData inconclusive": {`app_missing_metric`, sluicev1.NoDataInconclusive, sluicev1.MeasurementInconclusive, "no series"},
		"NaN":                            {`0/0`, "", sluicev1.MeasurementFailed, "returned NaN"},
		"NaN in a series":                {`sum(app_http_requests_total{namespace="good"}) * 0 / 0`, sluicev1.NoDataInconclusive, sluicev1.MeasurementInconclusive, "NaN"},
		"several series":                 {`app_http_requests_total`, "", sluicev1.MeasurementError, "a check needs one"},
		"syntax error":                   {`sum(app_http_requests_total`, "", sluicev1.MeasurementError, "prometheus refused the query"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			check := errorRateCheck()
			check.Query, check.NoData = tt.query, tt.noData
			m := (&Prometheus{}).Measure(context.Background(), promURL, &check, tt.query, time.Now())
			if m.Phase != tt.phase || !strings.Contains(m.Message, tt.message) {
				t.Fatalf("measurement = %+v, want %s saying %q", m, tt.phase, tt.message)
			}
		})
	}
}

// A Prometheus that answers 500 or does not answer in time is an Error
// measurement, which counts as a failure.
func TestMeasure_prometheusThatFails(t *testing.T) {
	broken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"status":"error","errorType":"internal","error":"storage is on fire"}`)
	}))
	defer broken.Close()
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer hanging.Close()
	// Runs before Close, which waits for the handlers.
	defer close(release)
	check := errorRateCheck()
	for name, tt := range map[string]struct{ url, message string }{
		"500":       {broken.URL, "answered with a server error"},
		"time out":  {hanging.URL, "did not answer in time"},
		"no server": {"http://" + mustFreeAddr(t), "could not be asked"},
	} {
		t.Run(name, func(t *testing.T) {
			m := (&Prometheus{Timeout: 200 * time.Millisecond}).Measure(context.Background(), tt.url, &check, "up", time.Now())
			if m.Phase != sluicev1.MeasurementError || !strings.Contains(m.Message, tt.message) {
				t.Fatalf("measurement = %+v, want Error saying %q", m, tt.message)
			}
			st := &sluicev1.VerificationStatus{}
			spec := &sluicev1.VerificationSpec{PrometheusURL: tt.url, Checks: []sluicev1.MetricCheck{check}}
			if d := Advance(context.Background(), &Prometheus{Timeout: 200 * time.Millisecond}, spec, st, sluicev1.QueryData{}, time.Now()); d.Outcome != Failed {
				t.Fatalf("Advance = %+v, want Failed", d)
			}
		})
	}
}

func mustFreeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// near reports whether the measured value v is within 1e-9 of want
// (Prometheus' increase() divides in floating point).
func near(v string, want float64) bool {
	f, err := strconv.ParseFloat(v, 64)
	return err == nil && math.Abs(f-want) < 1e-9
}
