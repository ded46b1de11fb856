package verify

import (
	"context"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Measurer takes one measurement of a check (Prometheus in production).
type Measurer interface {
	Measure(ctx context.Context, url string, check *sluicev1.MetricCheck, query string, now time.Time) sluicev1.Measurement
}

// Outcome is where a verification stands after a pass.
type Outcome int

// The outcomes of Advance.
const (
	// Pending: more measurements or soak time are due; look again After.
	Pending Outcome = iota
	// Passed: every check passed and the soak time is over.
	Passed
	// Failed: a check failed more often than its failureLimit allows.
	Failed
	// Inconclusive: a measurement was inconclusive; a person decides.
	Inconclusive
)

// Decision is what Advance concluded.
type Decision struct {
	Outcome Outcome
	// Reason and Message are the Verified condition's.
	Reason, Message string
	// After is when to look again (Pending only).
	After time.Duration
}

// Advance takes the measurements of spec's checks that are due at now,
// records them in st (counts, last time, the newest
// sluicev1.MaxMeasurements measurements) and decides. A check is due when
// it has fewer than Count measurements and its interval has passed since
// its last one; the first measurement of every check is due at once.
// Calling it again before anything is due measures nothing and changes
// nothing, so a restart or an early wake-up is harmless.
func Advance(ctx context.Context, m Measurer, spec *sluicev1.VerificationSpec, st *sluicev1.VerificationStatus, data sluicev1.QueryData, now time.Time) Decision {
	var next time.Duration
	for i := range spec.Checks {
		check := &spec.Checks[i]
		cs := checkStatus(st, check.Name)
		if cs.Measured >= check.CountOrDefault() {
			continue
		}
		if cs.LastAt != nil {
			if due := cs.LastAt.Add(check.IntervalOrDefault()).Sub(now); due > 0 {
				next = earliest(next, due)
				continue
			}
		}
		got := measure(ctx, m, spec, check, data, now)
		record(st, cs, got)
		if got.Phase == sluicev1.MeasurementInconclusive && cs.Inconclusive > check.InconclusiveLimit {
			return Decision{Outcome: Inconclusive, Reason: sluicev1.ReasonInconclusive,
				Message: fmt.Sprintf("check %s was inconclusive %d of %d measurements (inconclusiveLimit %d): %s; a person decides (kubectl sluice verify settle)",
					check.Name, cs.Inconclusive, cs.Measured, check.InconclusiveLimit, got.Message)}
		}
		if cs.Failed > check.FailureLimit {
			return Decision{Outcome: Failed, Reason: sluicev1.ReasonChecksFailed,
				Message: fmt.Sprintf("check %s failed %d of %d measurements (failureLimit %d): %s", check.Name, cs.Failed, cs.Measured, check.FailureLimit, describe(got))}
		}
		if cs.Measured < check.CountOrDefault() {
			next = earliest(next, check.IntervalOrDefault())
		}
	}
	if next > 0 {
		return Decision{Outcome: Pending, Reason: sluicev1.ReasonVerifying, Message: progress(spec, st), After: next}
	}
	if st.ChecksPassedAt == nil {
		t := metav1.NewTime(now)
		st.ChecksPassedAt = &t
	}
	if left := st.ChecksPassedAt.Add(spec.SoakTimeOrZero()).Sub(now); left > 0 {
		return Decision{Outcome: Pending, Reason: sluicev1.ReasonVerifying, Message: fmt.Sprintf("every check passed; soaking until %s", st.ChecksPassedAt.Add(spec.SoakTimeOrZero()).UTC().Format(time.RFC3339)), After: left}
	}
	return Decision{Outcome: Passed, Reason: sluicev1.ReasonVerificationPassed, Message: progress(spec, st)}
}

// measure renders the check's query and measures it; a template that
// does not render is an Error measurement (validation refuses it first).
func measure(ctx context.Context, m Measurer, spec *sluicev1.VerificationSpec, check *sluicev1.MetricCheck, data sluicev1.QueryData, now time.Time) sluicev1.Measurement {
	q, err := sluicev1.RenderQuery(check.Query, data)
	if err != nil {
		return sluicev1.Measurement{Check: check.Name, Query: truncate(check.Query, 4096), Phase: sluicev1.MeasurementError, Message: truncate(err.Error(), 1024), Time: metav1.NewMicroTime(now)}
	}
	got := m.Measure(ctx, spec.PrometheusURL, check, q, now)
	got.Query, got.Message, got.Value = truncate(got.Query, 4096), truncate(got.Message, 1024), truncate(got.Value, 64)
	return got
}

// record counts got in cs and keeps it among st's newest measurements.
func record(st *sluicev1.VerificationStatus, cs *sluicev1.CheckStatus, got sluicev1.Measurement) {
	cs.Measured++
	switch got.Phase {
	case sluicev1.MeasurementFailed, sluicev1.MeasurementError:
		cs.Failed++
	case sluicev1.MeasurementInconclusive:
		cs.Inconclusive++
	}
	t := got.Time
	cs.LastAt = &t
	st.Measurements = append(st.Measurements, got)
	if over := len(st.Measurements) - sluicev1.MaxMeasurements; over > 0 {
		st.Measurements = append([]sluicev1.Measurement(nil), st.Measurements[over:]...)
		st.MeasurementsDropped += int32(over)
	}
}

// checkStatus is the status entry of the check named name, added when
// missing.
func checkStatus(st *sluicev1.VerificationStatus, name string) *sluicev1.CheckStatus {
	for i := range st.Checks {
		if st.Checks[i].Name == name {
			return &st.Checks[i]
		}
	}
	st.Checks = append(st.Checks, sluicev1.CheckStatus{Name: name})
	return &st.Checks[len(st.Checks)-1]
}

// progress summarises the checks' counts.
func progress(spec *sluicev1.VerificationSpec, st *sluicev1.VerificationStatus) string {
	if len(spec.Checks) == 0 {
		return "healthy; no metric checks"
	}
	parts := make([]string, 0, len(spec.Checks))
	for i := range spec.Checks {
		c := &spec.Checks[i]
		cs := checkStatus(st, c.Name)
		parts = append(parts, fmt.Sprintf("%s %d/%d measured, %d failed", c.Name, cs.Measured, c.CountOrDefault(), cs.Failed))
	}
	return strings.Join(parts, "; ")
}

// describe is one measurement in a message.
func describe(m sluicev1.Measurement) string {
	if m.Value == "" {
		return fmt.Sprintf("%s: %s", m.Phase, m.Message)
	}
	if m.Message == "" {
		return fmt.Sprintf("%s, value %s", m.Phase, m.Value)
	}
	return fmt.Sprintf("%s, value %s: %s", m.Phase, m.Value, m.Message)
}

func earliest(a, b time.Duration) time.Duration {
	if a == 0 || b < a {
		return b
	}
	return a
}

// truncate bounds s to n bytes on a rune boundary (with an ellipsis).
func truncate(s string, n int) string { return text.Truncate(s, n-len("…")) }
