package v1alpha1

import (
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func goodCheck() MetricCheck {
	return MetricCheck{Name: "error-rate", Query: `sum(rate(errors{namespace="{{ .Namespace }}"}[1m]))`, SuccessCondition: "result < 0.005", Count: 3, FailureLimit: 1}
}

func goodSpec() *VerificationSpec {
	return &VerificationSpec{PrometheusURL: "http://prometheus:9090", Checks: []MetricCheck{goodCheck()}}
}

func TestVerificationValidate_acceptsAGoodSpec(t *testing.T) {
	if err := goodSpec().Validate(); err != nil {
		t.Fatal(err)
	}
	var none *VerificationSpec
	if err := none.Validate(); err != nil {
		t.Fatalf("nil spec: %v", err)
	}
}

// Every bad spec is refused with an error that names the field and says
// what is wrong.
func TestVerificationValidate_refusesBadSpecsWithClearErrors(t *testing.T) {
	tests := map[string]struct {
		edit func(v *VerificationSpec)
		want string
	}{
		"no prometheus URL":         {func(v *VerificationSpec) { v.PrometheusURL = "" }, "prometheusURL is required"},
		"prometheus URL scheme":     {func(v *VerificationSpec) { v.PrometheusURL = "ftp://x" }, "must be an http:// or https:// URL"},
		"no query":                  {func(v *VerificationSpec) { v.Checks[0].Query = " " }, "checks[0] (error-rate): query is required"},
		"unknown template field":    {func(v *VerificationSpec) { v.Checks[0].Query = "up{pod=\"{{ .Pod }}\"}" }, "query template"},
		"template syntax":           {func(v *VerificationSpec) { v.Checks[0].Query = "up{{" }, "query template"},
		"no condition":              {func(v *VerificationSpec) { v.Checks[0].SuccessCondition = "" }, "successCondition or failureCondition is required"},
		"condition without result":  {func(v *VerificationSpec) { v.Checks[0].SuccessCondition = "x < 1" }, `must start with "result"`},
		"condition operator":        {func(v *VerificationSpec) { v.Checks[0].FailureCondition = "result ~ 1" }, "expected one of"},
		"condition number":          {func(v *VerificationSpec) { v.Checks[0].SuccessCondition = "result < 0.5%" }, "not a finite number"},
		"condition NaN":             {func(v *VerificationSpec) { v.Checks[0].SuccessCondition = "result < NaN" }, "not a finite number"},
		"zero interval":             {func(v *VerificationSpec) { v.Checks[0].Interval = &metav1.Duration{} }, "interval must be positive"},
		"count too high":            {func(v *VerificationSpec) { v.Checks[0].Count = 101 }, "count must be between 1 and 100"},
		"negative failure limit":    {func(v *VerificationSpec) { v.Checks[0].FailureLimit = -1 }, "failureLimit must not be negative"},
		"failure limit never fails": {func(v *VerificationSpec) { v.Checks[0].FailureLimit = 3 }, "could never fail"},
		"bad noData":                {func(v *VerificationSpec) { v.Checks[0].NoData = "pass" }, `noData must be fail or inconclusive, not "pass"`},
		"duplicate name":            {func(v *VerificationSpec) { v.Checks = append(v.Checks, goodCheck()) }, `name "error-rate" is used twice`},
		"no name":                   {func(v *VerificationSpec) { v.Checks[0].Name = "" }, "name is required"},
		"negative soak":             {func(v *VerificationSpec) { v.SoakTime = &metav1.Duration{Duration: -time.Second} }, "soakTime must not be negative"},
		"zero health timeout":       {func(v *VerificationSpec) { v.HealthTimeout = &metav1.Duration{} }, "healthTimeout must be positive"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			v := goodSpec()
			tt.edit(v)
			err := v.Validate()
			if !errors.Is(err, ErrInvalidVerification) {
				t.Fatalf("Validate = %v, want ErrInvalidVerification", err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate = %q, want it to say %q", err, tt.want)
			}
		})
	}
}

func TestParseComparison_readsEveryOperator(t *testing.T) {
	tests := []struct {
		cond      string
		value     float64
		wantHolds bool
	}{
		{"result < 0.005", 0.001, true},
		{"result<0.005", 0.05, false},
		{"result <= 1", 1, true},
		{"result > 2", 2, false},
		{"result >= 2", 2, true},
		{"result == 0", 0, true},
		{"result != 0", 0, false},
		{" result < 1e-3 ", 0.0005, true},
	}
	for _, tt := range tests {
		c, err := ParseComparison(tt.cond)
		if err != nil {
			t.Fatalf("ParseComparison(%q): %v", tt.cond, err)
		}
		if got := c.Holds(tt.value); got != tt.wantHolds {
			t.Errorf("%q holds for %v = %v, want %v", tt.cond, tt.value, got, tt.wantHolds)
		}
	}
}

// A condition joins comparisons with && or ||, never both (a range like
// Flagger's thresholdRange needs &&).
func TestParseCondition_joinsComparisons(t *testing.T) {
	tests := []struct {
		cond      string
		value     float64
		wantHolds bool
	}{
		{"result >= 99 && result <= 100", 99.5, true},
		{"result >= 99 && result <= 100", 98, false},
		{"result >= 99 && result <= 100", 101, false},
		{"result < 1 || result > 5", 0, true},
		{"result < 1 || result > 5", 3, false},
		{"result < 1 || result > 5", 6, true},
		{"result < 1", 0, true},
	}
	for _, tt := range tests {
		c, err := ParseCondition(tt.cond)
		if err != nil {
			t.Fatalf("ParseCondition(%q): %v", tt.cond, err)
		}
		if got := c.Holds(tt.value); got != tt.wantHolds {
			t.Errorf("%q holds for %v = %v, want %v", tt.cond, tt.value, got, tt.wantHolds)
		}
	}
	for cond, want := range map[string]string{
		"result > 1 && result < 5 || result == 9": "mixes && and ||",
		"result > 1 && len(result) == 0":          `must start with "result"`,
		"result > 1 &&":                           `must start with "result"`,
	} {
		if _, err := ParseCondition(cond); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseCondition(%q) = %v, want an error saying %q", cond, err, want)
		}
	}
}

func TestRenderQuery_fillsTheDocumentedFields(t *testing.T) {
	got, err := RenderQuery(`x{ns="{{ .Namespace }}",r="{{ .Release }}",rev="{{ .Revision }}",at="{{ .AppliedAt }}"}`,
		QueryData{Release: "r1", Namespace: "n1", Revision: "abc", AppliedAt: "2026-01-02T03:04:05Z"})
	if err != nil {
		t.Fatal(err)
	}
	if want := `x{ns="n1",r="r1",rev="abc",at="2026-01-02T03:04:05Z"}`; got != want {
		t.Fatalf("RenderQuery = %s, want %s", got, want)
	}
}

func TestResolveVerification_environmentOverDefaults(t *testing.T) {
	if ResolveVerification(nil, nil) != nil {
		t.Fatal("no defaults and no block must be no verification")
	}
	defaults := &VerificationSpec{PrometheusURL: "http://default:9090", SoakTime: &metav1.Duration{Duration: time.Minute}, Checks: []MetricCheck{{Name: "default"}}}
	env := &VerificationSpec{SoakTime: &metav1.Duration{Duration: 5 * time.Minute}, Checks: []MetricCheck{goodCheck()}}
	got := ResolveVerification(defaults, env)
	if got.PrometheusURL != "http://default:9090" || got.SoakTime.Duration != 5*time.Minute || len(got.Checks) != 1 || got.Checks[0].Name != "error-rate" {
		t.Fatalf("ResolveVerification = %+v", got)
	}
	if defaults.SoakTime.Duration != time.Minute {
		t.Fatal("ResolveVerification changed the defaults")
	}
	if only := ResolveVerification(defaults, nil); only.Checks[0].Name != "default" {
		t.Fatalf("defaults alone = %+v", only)
	}
}

func TestDecodeVerification_refusesUnknownFields(t *testing.T) {
	_, err := DecodeVerification([]byte(`{"checks":[{"name":"a","query":"up","succesCondition":"result > 0"}]}`))
	if !errors.Is(err, ErrInvalidVerification) || !strings.Contains(err.Error(), "succesCondition") {
		t.Fatalf("DecodeVerification = %v, want the misspelt field named", err)
	}
	v, err := DecodeVerification([]byte(`{"soakTime":"2m","checks":[{"name":"a","query":"up","successCondition":"result > 0","interval":"30s"}]}`))
	if err != nil || v.SoakTime.Duration != 2*time.Minute || v.Checks[0].IntervalOrDefault() != 30*time.Second {
		t.Fatalf("DecodeVerification = %+v, %v", v, err)
	}
}

// A change's verification spec is part of its approvalDigest: weakening a
// check needs a new approval; a change without one keeps its old digest.
func TestApprovalDigest_coversTheVerificationSpec(t *testing.T) {
	const a = Digest("sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	cr := &ChangeRequest{ObjectMeta: metav1.ObjectMeta{Namespace: "ns"}, Spec: ChangeRequestSpec{Release: "svc-prod", ContentDigest: a}}
	without := cr.ExpectedApprovalDigest()
	if without != ComputeApprovalDigest("ns", "svc-prod", a, "", "") {
		t.Fatal("a change without verification must keep the digest it always had")
	}
	cr.Spec.Verification = goodSpec()
	strict := cr.ExpectedApprovalDigest()
	if strict == without {
		t.Fatal("adding a verification did not change the digest")
	}
	cr.Spec.Verification.Checks[0].SuccessCondition = "result < 0.5"
	if weaker := cr.ExpectedApprovalDigest(); weaker == strict {
		t.Fatal("weakening a check did not change the digest")
	}
}
