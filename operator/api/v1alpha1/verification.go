package v1alpha1

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"text/template"
	"time"
)

// Defaults of a verification spec's fields left empty.
const (
	// DefaultCheckInterval is a check's interval when none is given.
	DefaultCheckInterval = time.Minute
	// DefaultHealthTimeout is how long health may take when not given.
	DefaultHealthTimeout = 5 * time.Minute
)

// ErrInvalidVerification wraps every problem Validate finds.
var ErrInvalidVerification = errors.New("invalid verification")

// Comparison is a parsed success or failure condition: `result <op>
// <number>`.
type Comparison struct {
	// Op is one of < <= > >= == !=.
	Op string
	// Threshold is the number compared with.
	Threshold float64
}

// comparisonOps are the operators, longest first so "<=" is not read as
// "<".
var comparisonOps = []string{"<=", ">=", "==", "!=", "<", ">"}

// ParseComparison parses "result < 0.005" (spaces optional; the number may
// be written as Go's ParseFloat reads it, but not NaN or Inf).
func ParseComparison(s string) (Comparison, error) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "result")
	if !ok {
		return Comparison{}, fmt.Errorf("condition %q must start with \"result\", like \"result < 0.005\"", s)
	}
	rest = strings.TrimSpace(rest)
	for _, op := range comparisonOps {
		num, ok := strings.CutPrefix(rest, op)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
		if err != nil || v != v || v > 1e308 || v < -1e308 {
			return Comparison{}, fmt.Errorf("condition %q: %q is not a finite number", s, strings.TrimSpace(num))
		}
		return Comparison{Op: op, Threshold: v}, nil
	}
	return Comparison{}, fmt.Errorf("condition %q: expected one of < <= > >= == != after \"result\"", s)
}

// Holds reports whether v meets the comparison.
func (c Comparison) Holds(v float64) bool {
	switch c.Op {
	case "<":
		return v < c.Threshold
	case "<=":
		return v <= c.Threshold
	case ">":
		return v > c.Threshold
	case ">=":
		return v >= c.Threshold
	case "==":
		return v == c.Threshold
	case "!=":
		return v != c.Threshold
	}
	return false
}

// Condition is a parsed success or failure condition: one comparison, or
// several joined by && (all hold) or || (any holds), not mixed, e.g.
// "result >= 99 && result <= 100".
type Condition struct {
	// Comparisons are the parts, in order.
	Comparisons []Comparison
	// Any is true for ||, false for && (or a single comparison).
	Any bool
}

// ParseCondition parses a condition; && and || may not be mixed (write
// two checks instead), and each part is a ParseComparison.
func ParseCondition(s string) (Condition, error) {
	and, or := strings.Contains(s, "&&"), strings.Contains(s, "||")
	if and && or {
		return Condition{}, fmt.Errorf("condition %q mixes && and ||; use one of them (or two checks)", s)
	}
	sep := "&&"
	if or {
		sep = "||"
	}
	var c Condition
	c.Any = or
	for _, part := range strings.Split(s, sep) {
		cmp, err := ParseComparison(part)
		if err != nil {
			if and || or {
				return Condition{}, fmt.Errorf("condition %q: %w", s, err)
			}
			return Condition{}, err
		}
		c.Comparisons = append(c.Comparisons, cmp)
	}
	return c, nil
}

// Holds reports whether v meets the condition.
func (c Condition) Holds(v float64) bool {
	for _, cmp := range c.Comparisons {
		if cmp.Holds(v) == c.Any {
			return c.Any
		}
	}
	return !c.Any
}

// QueryData is what a check's query template may use.
type QueryData struct {
	// Release is the Release's name.
	Release string
	// Namespace is the release's target namespace.
	Namespace string
	// Revision is the commit applied.
	Revision string
	// AppliedAt is when the apply finished, RFC 3339.
	AppliedAt string
}

// RenderQuery fills in a check's query template; an unknown field or a
// template that does not parse is an error.
func RenderQuery(query string, data QueryData) (string, error) {
	t, err := template.New("query").Option("missingkey=error").Parse(query)
	if err != nil {
		return "", fmt.Errorf("query template: %w", err)
	}
	var b bytes.Buffer
	if err := t.Execute(&b, data); err != nil {
		return "", fmt.Errorf("query template: %w", err)
	}
	return b.String(), nil
}

// IntervalOrDefault is the check's interval, DefaultCheckInterval when
// none is given.
func (c *MetricCheck) IntervalOrDefault() time.Duration {
	if c.Interval == nil || c.Interval.Duration <= 0 {
		return DefaultCheckInterval
	}
	return c.Interval.Duration
}

// CountOrDefault is how many measurements the check takes (1 by default).
func (c *MetricCheck) CountOrDefault() int32 {
	if c.Count <= 0 {
		return 1
	}
	return c.Count
}

// NoDataOrDefault is the check's rule for no data (fail by default).
func (c *MetricCheck) NoDataOrDefault() NoDataPolicy {
	if c.NoData == "" {
		return NoDataFail
	}
	return c.NoData
}

// HealthTimeoutOrDefault is the spec's health timeout, or the default.
func (v *VerificationSpec) HealthTimeoutOrDefault() time.Duration {
	if v.HealthTimeout == nil || v.HealthTimeout.Duration <= 0 {
		return DefaultHealthTimeout
	}
	return v.HealthTimeout.Duration
}

// SoakTimeOrZero is the spec's soak time (none by default).
func (v *VerificationSpec) SoakTimeOrZero() time.Duration {
	if v.SoakTime == nil || v.SoakTime.Duration < 0 {
		return 0
	}
	return v.SoakTime.Duration
}

// Validate reports every problem of the spec, each naming its field, as
// one error wrapping ErrInvalidVerification; nil when it can be run.
func (v *VerificationSpec) Validate() error {
	if v == nil {
		return nil
	}
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	if v.HealthTimeout != nil && v.HealthTimeout.Duration <= 0 {
		add("healthTimeout must be positive")
	}
	if v.SoakTime != nil && v.SoakTime.Duration < 0 {
		add("soakTime must not be negative")
	}
	if len(v.Checks) > 0 && v.PrometheusURL == "" {
		add("prometheusURL is required with checks (here or in the Repository's verification defaults)")
	}
	if v.PrometheusURL != "" {
		if u, err := url.Parse(v.PrometheusURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			add("prometheusURL %q must be an http:// or https:// URL", v.PrometheusURL)
		}
	}
	if len(v.Checks) > 16 {
		add("at most 16 checks, not %d", len(v.Checks))
	}
	seen := map[string]bool{}
	for i := range v.Checks {
		for _, p := range v.Checks[i].problems() {
			add("checks[%d] (%s): %s", i, v.Checks[i].Name, p)
		}
		if seen[v.Checks[i].Name] {
			add("checks[%d]: name %q is used twice", i, v.Checks[i].Name)
		}
		seen[v.Checks[i].Name] = true
	}
	if len(problems) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrInvalidVerification, strings.Join(problems, "; "))
}

// problems lists what is wrong with one check.
func (c *MetricCheck) problems() []string {
	var out []string
	if c.Name == "" {
		out = append(out, "name is required")
	}
	if strings.TrimSpace(c.Query) == "" {
		out = append(out, "query is required")
	} else if _, err := RenderQuery(c.Query, QueryData{}); err != nil {
		out = append(out, err.Error()+" (the query may use .Release, .Namespace, .Revision and .AppliedAt)")
	}
	if c.SuccessCondition == "" && c.FailureCondition == "" {
		out = append(out, "successCondition or failureCondition is required")
	}
	for _, cond := range []string{c.SuccessCondition, c.FailureCondition} {
		if cond == "" {
			continue
		}
		if _, err := ParseCondition(cond); err != nil {
			out = append(out, err.Error())
		}
	}
	if c.Interval != nil && c.Interval.Duration <= 0 {
		out = append(out, "interval must be positive")
	}
	if c.Count < 0 || c.Count > 100 {
		out = append(out, fmt.Sprintf("count must be between 1 and 100, not %d", c.Count))
	}
	if c.InconclusiveLimit < 0 {
		out = append(out, "inconclusiveLimit must not be negative")
	}
	if c.FailureLimit < 0 {
		out = append(out, "failureLimit must not be negative")
	} else if c.FailureLimit >= c.CountOrDefault() {
		out = append(out, fmt.Sprintf("failureLimit %d tolerates every one of the %d measurements, so the check could never fail", c.FailureLimit, c.CountOrDefault()))
	}
	switch c.NoData {
	case "", NoDataFail, NoDataInconclusive:
	default:
		out = append(out, fmt.Sprintf("noData must be fail or inconclusive, not %q", c.NoData))
	}
	return out
}

// ResolveVerification is the verification a change carries: env (the
// environment's block in service.yaml) over defaults (the Repository's),
// field by field; env's checks, when it has any, replace the default
// checks. Nil when neither is set.
func ResolveVerification(defaults, env *VerificationSpec) *VerificationSpec {
	if defaults == nil && env == nil {
		return nil
	}
	out := &VerificationSpec{}
	if defaults != nil {
		out = defaults.DeepCopy()
	}
	if env == nil {
		return out
	}
	if env.HealthTimeout != nil {
		out.HealthTimeout = env.HealthTimeout.DeepCopy()
	}
	if env.SoakTime != nil {
		out.SoakTime = env.SoakTime.DeepCopy()
	}
	if env.PrometheusURL != "" {
		out.PrometheusURL = env.PrometheusURL
	}
	if len(env.Checks) > 0 {
		out.Checks = make([]MetricCheck, len(env.Checks))
		for i := range env.Checks {
			env.Checks[i].DeepCopyInto(&out.Checks[i])
		}
	}
	return out
}

// DecodeVerification reads a verification block from its JSON form (the
// syncer converts the YAML of service.yaml to it), refusing unknown
// fields, so a misspelt check is an error rather than a check not run.
func DecodeVerification(data []byte) (*VerificationSpec, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	v := &VerificationSpec{}
	if err := dec.Decode(v); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalidVerification, err)
	}
	return v, nil
}

// VerificationDigest is the sha256 of the spec's canonical JSON (Go's
// encoding of the struct: fields in declaration order, durations as
// strings), "" for none.
func VerificationDigest(v *VerificationSpec) Digest {
	if v == nil {
		return ""
	}
	b, err := json.Marshal(v)
	if err != nil {
		// A struct of strings, numbers and durations always encodes.
		panic(fmt.Sprintf("encode verification spec: %v", err))
	}
	return SHA256Digest(b)
}
