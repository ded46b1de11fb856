package verify

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// scripted answers each measurement with the next value of a script (a
// unit test of the pure step; Prometheus itself is in prometheus_test.go).
type scripted struct {
	values []float64
	calls  int
}

func (s *scripted) Measure(_ context.Context, _ string, check *sluicev1.MetricCheck, query string, now time.Time) sluicev1.Measurement {
	v := s.values[min(s.calls, len(s.values)-1)]
	s.calls++
	phase, msg := judge(check, v)
	return sluicev1.Measurement{Check: check.Name, Query: query, Value: strconv.FormatFloat(v, 'g', -1, 64), Phase: phase, Message: msg, Time: metav1.NewMicroTime(now)}
}

func spec(count, limit int32, soak time.Duration) *sluicev1.VerificationSpec {
	return &sluicev1.VerificationSpec{PrometheusURL: "http://p", SoakTime: &metav1.Duration{Duration: soak}, Checks: []sluicev1.MetricCheck{{
		Name: "c", Query: "q", SuccessCondition: "result < 1", Interval: &metav1.Duration{Duration: time.Minute}, Count: count, FailureLimit: limit}}}
}

// A pass before the next measurement is due measures nothing and changes
// nothing (a restart or an early wake-up), and says when it is due.
func TestAdvance_nothingDueChangesNothing(t *testing.T) {
	m := &scripted{values: []float64{0}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &sluicev1.VerificationStatus{}
	d := Advance(context.Background(), m, spec(3, 0, 0), st, sluicev1.QueryData{}, now)
	if d.Outcome != Pending || d.After != time.Minute || m.calls != 1 {
		t.Fatalf("first pass: %+v, %d calls", d, m.calls)
	}
	before := st.DeepCopy()
	d = Advance(context.Background(), m, spec(3, 0, 0), st, sluicev1.QueryData{}, now.Add(20*time.Second))
	if d.Outcome != Pending || d.After != 40*time.Second || m.calls != 1 || len(st.Measurements) != len(before.Measurements) {
		t.Fatalf("early pass: %+v, %d calls", d, m.calls)
	}
}

// failureLimit tolerates that many failed measurements; one more fails.
func TestAdvance_failureLimit(t *testing.T) {
	m := &scripted{values: []float64{5, 0, 5}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &sluicev1.VerificationStatus{}
	var d Decision
	for i := 0; i < 3; i++ {
		d = Advance(context.Background(), m, spec(3, 1, 0), st, sluicev1.QueryData{}, now.Add(time.Duration(i)*time.Minute))
	}
	if d.Outcome != Failed || st.Checks[0].Failed != 2 {
		t.Fatalf("decision %+v, status %+v", d, st.Checks)
	}
}

// After every check passed the soak time runs; then it passes.
func TestAdvance_soakTime(t *testing.T) {
	m := &scripted{values: []float64{0}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &sluicev1.VerificationStatus{}
	d := Advance(context.Background(), m, spec(1, 0, 10*time.Minute), st, sluicev1.QueryData{}, now)
	if d.Outcome != Pending || d.After != 10*time.Minute || st.ChecksPassedAt == nil {
		t.Fatalf("soaking: %+v", d)
	}
	if d = Advance(context.Background(), m, spec(1, 0, 10*time.Minute), st, sluicev1.QueryData{}, now.Add(10*time.Minute)); d.Outcome != Passed || m.calls != 1 {
		t.Fatalf("after the soak: %+v, %d calls", d, m.calls)
	}
}

// Only the newest MaxMeasurements are kept; the rest are counted.
func TestAdvance_keepsTheNewestMeasurements(t *testing.T) {
	m := &scripted{values: []float64{0}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	st := &sluicev1.VerificationStatus{}
	for i := 0; i < 40; i++ {
		Advance(context.Background(), m, spec(40, 0, 0), st, sluicev1.QueryData{}, now.Add(time.Duration(i)*time.Minute))
	}
	if len(st.Measurements) != sluicev1.MaxMeasurements || st.MeasurementsDropped != 40-sluicev1.MaxMeasurements || st.Checks[0].Measured != 40 ||
		!st.Measurements[len(st.Measurements)-1].Time.Time.Equal(now.Add(39*time.Minute)) {
		t.Fatalf("kept %d, dropped %d, measured %d", len(st.Measurements), st.MeasurementsDropped, st.Checks[0].Measured)
	}
}

// inconclusiveLimit tolerates that many inconclusive measurements (they
// neither pass nor fail); one more stops the verification for a person.
func TestAdvance_inconclusiveLimit(t *testing.T) {
	// Between the conditions: neither success (< 1) nor failure (> 5).
	m := &scripted{values: []float64{3, 0, 3}}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	sp := spec(3, 0, 0)
	sp.Checks[0].FailureCondition, sp.Checks[0].InconclusiveLimit = "result > 5", 1
	st := &sluicev1.VerificationStatus{}
	d := Advance(context.Background(), m, sp, st, sluicev1.QueryData{}, now)
	if d.Outcome != Pending || st.Checks[0].Inconclusive != 1 {
		t.Fatalf("first inconclusive is tolerated: %+v, %+v", d, st.Checks)
	}
	d = Advance(context.Background(), m, sp, st, sluicev1.QueryData{}, now.Add(time.Minute))
	d = Advance(context.Background(), m, sp, st, sluicev1.QueryData{}, now.Add(2*time.Minute))
	if d.Outcome != Inconclusive || st.Checks[0].Inconclusive != 2 || st.Checks[0].Failed != 0 || !strings.Contains(d.Message, "inconclusiveLimit 1") {
		t.Fatalf("second inconclusive: %+v, %+v", d, st.Checks)
	}
}
