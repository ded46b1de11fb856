package plugin

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// describe shows the verification's measurements: check, phase, value,
// age and the query as sent.
func TestPrintVerification_showsTheMeasurements(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	cr := &sluicev1.ChangeRequest{Status: sluicev1.ChangeRequestStatus{Verification: &sluicev1.VerificationStatus{
		StartedAt: metav1.NewTime(now.Add(-3 * time.Minute)), Message: "check error-rate failed 1 of 1 measurements",
		MeasurementsDropped: 2,
		Measurements: []sluicev1.Measurement{{Check: "error-rate", Query: `sum(rate(errors{namespace="web"}[1m]))`, Value: "0.05",
			Phase: sluicev1.MeasurementFailed, Message: `successCondition "result < 0.005" does not hold`, Time: metav1.NewMicroTime(now.Add(-time.Minute))}},
	}}}
	var b bytes.Buffer
	if err := printVerification(&b, cr, now); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Verification:", "started 3m", "failed 1 of 1", "2 older measurements", "error-rate", "Failed", "0.05", `namespace="web"`, "does not hold"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe output lacks %q:\n%s", want, out)
		}
	}
	var none bytes.Buffer
	if err := printVerification(&none, &sluicev1.ChangeRequest{}, now); err != nil || none.Len() != 0 {
		t.Fatalf("a change without verification printed %q (%v)", none.String(), err)
	}
}

// describe says what a rollback undoes and returns to, its revert pull
// request (or why none), and that a change
// caught by its Release's quarantine is never auto-approved, and why.
func TestRollbackFields_showRollbackAndQuarantine(t *testing.T) {
	cr := &sluicev1.ChangeRequest{Spec: sluicev1.ChangeRequestSpec{ApprovalDigest: "sha256:b", ContentDigest: "sha256:c",
		Rollback: &sluicev1.RollbackSpec{Of: "web-prod-2222222222", To: "web-prod-1111111111"}}}
	d := &Description{ChangeRequest: cr, Quarantined: &sluicev1.QuarantineEntry{ChangeRequest: "web-prod-2222222222", ApprovalDigest: "sha256:a", ContentDigest: "sha256:c"}}
	got := rollbackFields(d)
	if len(got) != 2 {
		t.Fatalf("fields %v", got)
	}
	if got[0][0] != "Rollback" || !strings.Contains(got[0][1], "of web-prod-2222222222") || !strings.Contains(got[0][1], "back to the verified web-prod-1111111111") {
		t.Errorf("rollback line %v", got[0])
	}
	if got[1][0] != "Quarantined" || !strings.Contains(got[1][1], "web-prod-2222222222 failed its verification with this content sha256:c") || !strings.Contains(got[1][1], "never auto-approved") {
		t.Errorf("quarantine line %v", got[1])
	}
	cr.Annotations = map[string]string{sluicev1.AnnotationRevertPullRequest: "https://git.example/acme/infra/pulls/3"}
	if got := rollbackFields(d); len(got) != 3 || got[1] != [2]string{"Revert PR", "https://git.example/acme/infra/pulls/3"} {
		t.Errorf("revert pull request line: %v", got)
	}
	cr.Annotations = map[string]string{sluicev1.AnnotationRevertDeclined: "no revert pull request of web-prod-2222222222: …"}
	if got := rollbackFields(d); len(got) != 3 || !strings.HasPrefix(got[1][1], "no revert pull request of") {
		t.Errorf("declined revert line: %v", got)
	}
	if f := rollbackFields(&Description{ChangeRequest: &sluicev1.ChangeRequest{}}); len(f) != 0 {
		t.Errorf("a plain change shows %v", f)
	}
}

// audit -o json carries the applied change's verification: its outcome,
// spec, settle and measurements, as JSON a compliance tool can store.
func TestAuditJSON_carriesTheVerification(t *testing.T) {
	cr := &sluicev1.ChangeRequest{}
	if verificationOf(cr) != nil {
		t.Fatal("a change without verification attests one")
	}
	cr.Spec.Verification = &sluicev1.VerificationSpec{PrometheusURL: "http://p:9090", Checks: []sluicev1.MetricCheck{{Name: "error-rate", Query: "q", SuccessCondition: "result < 1"}}}
	cr.Status.Phase = sluicev1.PhaseVerified
	cr.Status.Verification = &sluicev1.VerificationStatus{
		Settled:      &sluicev1.VerificationSettlement{Approver: "k8s:alice", Decision: sluicev1.DecisionVerifyPass, Reason: "quiet night"},
		Measurements: []sluicev1.Measurement{{Check: "error-rate", Phase: sluicev1.MeasurementInconclusive, Query: "q", Message: "no series"}},
	}
	b, err := json.Marshal(Attestation{Verification: verificationOf(cr)})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"verification":{"phase":"Verified"`, `"checks":[{"name":"error-rate"`, `"settled":{"approval":"","approver":"k8s:alice","decision":"verify-pass","reason":"quiet night"`,
		`"measurements":[{"check":"error-rate","query":"q","phase":"Inconclusive","message":"no series"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("audit JSON lacks %s:\n%s", want, b)
		}
	}
}
