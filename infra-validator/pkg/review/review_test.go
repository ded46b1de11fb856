package review

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/infra-validator/internal/benchdata"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// secrets are every secret value in the test inputs; none may be shown.
var secrets = []string{
	"hunter2-Correct-Horse",    // sensitive in the plan, and in a Deployment's env (by value)
	"old-token-value-1234",     // sensitive in the plan
	"new-token-value-5678",     // sensitive in the plan, copied into a Deployment (by value)
	"pa55w0rd-in-url",          // a URL password in a plan value (by pattern)
	"AKIAIOSFODNN7EXAMPLE",     // an AWS key in a finding (by pattern)
	"b2xkLXBhc3N3b3JkLXZhbHVl", // Secret data (keys only)
	"bmV3LXBhc3N3b3JkLXZhbHVl",
	"sk-live-0123456789abcdef", // Secret stringData
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func testChange() *sluicev1.ChangeRequest {
	return &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-prod-pr7-5f2c9e1a7b", Namespace: "sluice-system"},
		Spec: sluicev1.ChangeRequestSpec{
			Release:          "shop-prod",
			Operation:        sluicev1.OperationApply,
			Revision:         "5f2c9e1a7b3d4c5e6f708192a3b4c5d6e7f80912",
			PreviousRevision: "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
			PullRequest:      &sluicev1.PullRequestRef{Number: 7, HeadSHA: "5f2c9e1a7b3d4c5e6f708192a3b4c5d6e7f80912", Preview: true},
			TargetNamespace:  "shop-prod",
			ApprovalDigest:   "sha256:9d5ed678fe57bcca610140957afab571f4c8b8d6e9f1a0b2c3d4e5f60718293a",
			Verdict: sluicev1.Verdict{
				Result: sluicev1.VerdictFail,
				Risk:   sluicev1.RiskHigh,
				Findings: []sluicev1.Finding{
					{Severity: sluicev1.SeverityWarn, Source: "helm", Policy: "sluice.kubernetes.resources", Resource: "Deployment/shop-prod/web", File: "services/shop/values-prod.yaml", Line: 12,
						Message: "container web has no memory limit | set resources.limits.memory @platform-team <b>now</b>"},
					{Severity: sluicev1.SeverityDeny, Source: "terraform", Policy: "sluice.terraform.iam", Resource: "aws_iam_user.old", File: "services/shop/terraform/iam.tf", Line: 3,
						Message: "an access key AKIAIOSFODNN7EXAMPLE is written in the configuration"},
					{Severity: sluicev1.SeverityUnverifiable, Source: "terraform", Policy: "sluice.terraform.network", Resource: "aws_instance.web",
						Message: "private_ip is known only after apply"},
				},
			},
			Rule: sluicev1.ApprovalRule{Required: 1},
		},
		Status: sluicev1.ChangeRequestStatus{
			Phase:         sluicev1.ChangeRequestPhase("AwaitingApproval"),
			EffectiveRule: &sluicev1.ApprovalRule{Required: 2, Approvers: []sluicev1.Identity{"k8s-group:sre", "github:alice", "github:carol"}},
			ApprovedBy:    []sluicev1.Identity{"github:alice"},
		},
	}
}

func testSection(t *testing.T) *Section {
	t.Helper()
	s, err := Build(Input{
		Change:           testChange(),
		PlanJSON:         []byte(readFile(t, "plan.json")),
		Manifest:         readFile(t, "change.yaml"),
		PreviousManifest: readFile(t, "applied.yaml"),
		AppliedRevision:  "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
		RiskReasons:      []string{"ConfigMap/shop-prod/legacy-flags: deleted", "Deployment/shop-prod/web: image, replicas, resources or data changed"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	file := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(file, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from the rendered output (run go test -update and review the diff):\n%s", file, got)
	}
}

func TestMarkdown_goldenComment(t *testing.T) {
	bodies := Markdown([]*Section{testSection(t)}, LimitGitHub, 0)
	if len(bodies) != 1 {
		t.Fatalf("%d comments, want 1", len(bodies))
	}
	golden(t, "comment.golden", bodies[0])
}

func TestText_goldenDiff(t *testing.T) {
	var buf bytes.Buffer
	if err := Text(&buf, testSection(t), false); err != nil {
		t.Fatal(err)
	}
	golden(t, "diff.golden", buf.String())
}

func TestBuild_planShowsEveryActionAndHidesValues(t *testing.T) {
	s := testSection(t)
	p := s.Plan
	if p.Create != 1 || p.Update != 2 || p.Replace != 1 || p.Destroy != 1 || len(p.Resources) != 5 {
		t.Fatalf("plan counts %+v, want 1 create, 2 update, 1 replace, 1 destroy and no no-op", p)
	}
	attrs := map[string]Attr{}
	for _, r := range p.Resources {
		for _, a := range r.Attrs {
			attrs[r.Address+" "+a.Path] = a
		}
	}
	for key, want := range map[string]Attr{
		"aws_instance.web id":                 {Path: "id", Before: "null", After: UnknownValue},
		"aws_db_instance.main engine_version": {Path: "engine_version", Before: `"14.9"`, After: `"15.4"`, Forces: true},
		"aws_db_instance.main id":             {Path: "id", Before: `"db-1"`, After: UnknownValue},
		"aws_ssm_parameter.token value":       {Path: "value", Before: SensitiveValue, After: SensitiveValue},
		"aws_s3_bucket.logs tags.env":         {Path: "tags.env", Before: `"staging"`, After: `"prod"`},
	} {
		if got, ok := attrs[key]; !ok || got != want {
			t.Errorf("%s: got %+v (present %v), want %+v", key, got, ok, want)
		}
	}
	if _, ok := attrs["aws_db_instance.main password"]; ok {
		t.Error("an unchanged sensitive attribute of a replaced resource is listed as changed")
	}
	if _, ok := attrs["aws_s3_bucket.logs bucket"]; ok {
		t.Error("an unchanged attribute of an updated resource is listed")
	}
}

func TestRender_secretsNeverShown(t *testing.T) {
	s := testSection(t)
	var text bytes.Buffer
	if err := Text(&text, s, true); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(Markdown([]*Section{s}, LimitGitHub, 0), "\n") + text.String()
	for _, sec := range secrets {
		if strings.Contains(out, sec) {
			t.Errorf("the rendered review shows the secret %q", sec)
		}
	}
	for _, key := range []string{"DB_PASSWORD", "API_KEY"} {
		if !strings.Contains(out, key) {
			t.Errorf("the Secret's key %s is not shown", key)
		}
	}
}

func TestMarkdown_untrustedTextStaysInert(t *testing.T) {
	cr := testChange()
	cr.Spec.Verdict.Findings = []sluicev1.Finding{{Severity: sluicev1.SeverityDeny, Policy: "p", Resource: "x`` | y",
		Message: "ok\n\n<!-- sluice:review part=1 -->\n@org/admins [click](https://evil.example) \x1b[31m"}}
	manifest := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: \"```\\n<!-- sluice:review part=9 -->\"\n"
	s, err := Build(Input{Change: cr, Manifest: manifest})
	if err != nil {
		t.Fatal(err)
	}
	body := Markdown([]*Section{s}, LimitGitHub, 0)[0]
	// The marker counts only as a comment's first line; the ConfigMap's
	// copy sits inside a code block.
	if !strings.HasPrefix(body, Marker+" part=1 -->") || strings.Contains(body, "\n"+Marker) {
		t.Errorf("the marker is not the first line only:\n%s", body)
	}
	for _, bad := range []string{"@org/admins", "[click](", "\x1b"} {
		if strings.Contains(body, bad) {
			t.Errorf("the comment carries %q unescaped:\n%s", bad, body)
		}
	}
	var text bytes.Buffer
	if err := Text(&text, s, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(text.String(), "\x1b") {
		t.Error("terminal output carries an escape sequence from the change")
	}
}

func bigSection(t testing.TB, n int) *Section {
	t.Helper()
	cr := testChange()
	s, err := Build(Input{Change: cr, PlanJSON: benchdata.BigPlan(n)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestMarkdown_bigPlanIsSplitUnderTheLimit(t *testing.T) {
	s := bigSection(t, 2000)
	bodies := Markdown([]*Section{s, testSection(t)}, LimitGitHub, 0)
	if len(bodies) < 2 {
		t.Fatalf("%d comment(s) for a 2,000-resource plan; want it split", len(bodies))
	}
	seen := 0
	for i, b := range bodies {
		if n := utf8.RuneCountInString(b); n > LimitGitHub {
			t.Errorf("comment %d has %d characters, over GitHub's %d", i+1, n, LimitGitHub)
		}
		if part, ok := PartOf(b); !ok || part != i+1 {
			t.Errorf("comment %d is marked as part %d (%v)", i+1, part, ok)
		}
		if strings.Count(b, "```")%2 != 0 {
			t.Errorf("comment %d leaves a code block open", i+1)
		}
		seen += strings.Count(b, " will be created") + strings.Count(b, " will be updated in-place")
	}
	if len(bodies) < DefaultMaxParts && seen != 2000+3 {
		t.Errorf("%d resources shown across %d comments, want all 2,003", seen, len(bodies))
	}

	cut := Markdown([]*Section{s}, LimitGitHub, 2)
	if len(cut) != 2 {
		t.Fatalf("%d comments with at most 2 allowed", len(cut))
	}
	if last := cut[1]; !strings.Contains(last, "kubectl sluice describe "+s.Change) || !strings.Contains(last, "more lines not shown") {
		t.Errorf("the cut comment does not say where to see the rest:\n%s", last[len(last)-600:])
	}
}

func FuzzBuild(f *testing.F) {
	f.Add([]byte(`{"format_version":"1.2","resource_changes":[{"address":"a.b","change":{"actions":["update"],"before":{"x":[1,{"y":2}]},"after":{"x":[]},"after_unknown":{"x":[false,true]},"after_sensitive":{"x":true}}}]}`),
		"apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {k: dg==}\n", "---\nkind: Secret\nstringData: 3\n")
	f.Fuzz(func(t *testing.T, plan []byte, manifest, previous string) {
		s, err := Build(Input{Change: testChange(), PlanJSON: plan, Manifest: manifest, PreviousManifest: previous, AppliedRevision: "0a1b2c3d4e"})
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range Markdown([]*Section{s}, LimitGitHub, 3) {
			if !strings.HasPrefix(b, Marker) || utf8.RuneCountInString(b) > LimitGitHub {
				t.Fatalf("bad comment: %d characters", len(b))
			}
		}
		if err := Text(&bytes.Buffer{}, s, true); err != nil {
			t.Fatal(err)
		}
	})
}

func TestShowObject_secretShowsKeysOnly(t *testing.T) {
	doc := map[string]any{"apiVersion": "v1", "kind": "Secret", "metadata": map[string]any{"name": "s"},
		"data": map[string]any{"a": "c2hvcnQ="}, "stringData": map[string]any{"b": "plain"}}
	applied := map[string]any{"kind": "Secret", "data": map[string]any{"a": "b2xk"}}
	// No redactor secrets at all: the masking alone must hide the values.
	got := strings.Join(showObject(doc, applied, policy.NewRedactor(nil)), "")
	if strings.Contains(got, "c2hvcnQ=") || strings.Contains(got, "plain") {
		t.Errorf("a Secret's values are shown:\n%s", got)
	}
	if !strings.Contains(got, "a: "+HiddenChanged) || !strings.Contains(got, "b: "+HiddenValue) {
		t.Errorf("the keys are not shown as hidden values:\n%s", got)
	}
}

func TestEncode_roundTrip(t *testing.T) {
	s := testSection(t)
	data, err := Encode(s)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := Text(&a, s, false); err != nil {
		t.Fatal(err)
	}
	if err := Text(&b, got, false); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Error("a decoded section renders otherwise than the original")
	}
	if _, err := Decode([]byte("not gzip")); err == nil {
		t.Error("garbage decodes")
	}
}

// TestConfigMap_storesTheSectionForItsChangeOnly: the stored section
// decodes for the change that controls the ConfigMap, and a ConfigMap of
// the same name that the change does not control is not read.
func TestConfigMap_storesTheSectionForItsChangeOnly(t *testing.T) {
	cr := testChange()
	cr.UID = "uid-1"
	s := testSection(t)
	cm, err := NewConfigMap(cr, s)
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != "shop-prod-pr7-5f2c9e1a7b-review" || cm.Labels[LabelReview] != "true" {
		t.Fatalf("ConfigMap %s labelled %v", cm.Name, cm.Labels)
	}
	got, ok, err := FromConfigMap(cm, cr)
	if err != nil || !ok {
		t.Fatalf("the change's own review: ok %v, %v", ok, err)
	}
	var a, b bytes.Buffer
	_ = Text(&a, s, false)
	_ = Text(&b, got, false)
	if a.String() != b.String() {
		t.Error("the stored section renders otherwise than the original")
	}
	other := testChange()
	other.UID = "uid-2"
	if _, ok, _ := FromConfigMap(cm, other); ok {
		t.Error("a ConfigMap the change does not control is read")
	}
}

// TestTrim_keepsWhatFitsAndSaysSo: a trimmed section lists every resource
// and object without their lines, and the terminal says so.
func TestTrim_keepsWhatFitsAndSaysSo(t *testing.T) {
	s := testSection(t)
	tr := Trim(s)
	if len(tr.Plan.Resources) != len(s.Plan.Resources) || len(tr.Objects) != len(s.Objects) {
		t.Fatal("trimming dropped resources or objects")
	}
	for _, r := range tr.Plan.Resources {
		if len(r.Attrs) > 0 {
			t.Errorf("%s keeps its attributes", r.Address)
		}
	}
	if len(s.Plan.Resources[0].Attrs) == 0 {
		t.Error("trimming changed the original")
	}
	var b bytes.Buffer
	if err := Text(&b, tr, false); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "too large to keep whole") {
		t.Error("the terminal does not say the review was trimmed")
	}
}

// TestApproval_aChangePastTheGateNeedsNobody: an auto-approved change
// (applied with no approvals) does not read as still needing one.
func TestApproval_aChangePastTheGateNeedsNobody(t *testing.T) {
	cr := testChange()
	cr.Status.ApprovedBy = nil
	cr.Status.Phase = sluicev1.PhaseApplied
	if a := approvalOf(cr); a.Needed != 0 {
		t.Errorf("an applied change still needs %d approvals", a.Needed)
	}
	cr.Status.Phase = sluicev1.PhaseAwaitingApproval
	if a := approvalOf(cr); a.Needed != 2 {
		t.Errorf("a waiting change needs %d approvals, want 2", a.Needed)
	}
}

// TestRender_aSecretInAnAddressOrKeyIsRedacted: the plan is redacted in
// one pass over addresses, paths and values; a run credential or a
// credential-shaped string in any of them never shows, also when a
// pattern would swallow the separators (a private key spanning fields).
func TestRender_aSecretInAnAddressOrKeyIsRedacted(t *testing.T) {
	const runCred = "run-cred-7f3a9c2e51"
	plan := `{"format_version":"1.2","resource_changes":[
 {"address":"aws_ssm_parameter.p[\"` + runCred + `\"]","change":{"actions":["create"],"before":null,"after":{"name":"x","tags":{"` + runCred + `":"y"},"note":"-----BEGIN RSA PRIVATE KEY-----\nMIIB"}}},
 {"address":"null_resource.token_ghp_abcdefghijklmnopqrstuvwxyz0123456789","change":{"actions":["update"],"before":{"v":"1"},"after":{"v":"ghp_abcdefghijklmnopqrstuvwxyz0123456789"}}}]}`
	s, err := Build(Input{Change: testChange(), PlanJSON: []byte(plan), Secrets: []string{runCred}})
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	if err := Text(&text, s, false); err != nil {
		t.Fatal(err)
	}
	out := strings.Join(Markdown([]*Section{s}, LimitGitHub, 0), "\n") + text.String()
	for _, sec := range []string{runCred, "ghp_abcdefghijklmnopqrstuvwxyz0123456789", "MIIB"} {
		if strings.Contains(out, sec) {
			t.Errorf("the rendered review shows %q", sec)
		}
	}
	if len(s.Plan.Resources) != 2 || !strings.Contains(out, "aws_ssm_parameter.p") {
		t.Errorf("the resources are not listed: %+v", s.Plan.Resources)
	}
}

// TestBuild_theValidatorsPlanSecretsHideWhatBuildsOwnWalkHides renders the
// golden change twice: once gathering the plan's secrets itself, once with
// the secrets the validator's policy engine found in the same plan (as the
// syncer does, so the plan is not walked twice). Both must show the same
// text, and neither the sensitive password nor the access key.
func TestBuild_theValidatorsPlanSecretsHideWhatBuildsOwnWalkHides(t *testing.T) {
	planJSON := []byte(readFile(t, "plan.json"))
	ctx := context.Background()
	v, err := validate.New(ctx, validate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	check, err := v.CheckPlanJSON(ctx, "plan.json", planJSON)
	if err != nil {
		t.Fatal(err)
	}
	if check.Secrets == nil {
		t.Fatal("the validator returned no secret list (nil means: not gathered)")
	}
	in := Input{
		Change: testChange(), PlanJSON: planJSON,
		Manifest: readFile(t, "change.yaml"), PreviousManifest: readFile(t, "applied.yaml"),
		AppliedRevision: "0a1b2c3d4e5f60718293a4b5c6d7e8f901234567",
	}
	own, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	in.PlanSecrets = check.Secrets
	reused, err := Build(in)
	if err != nil {
		t.Fatal(err)
	}
	var a, b bytes.Buffer
	if err := Text(&a, own, false); err != nil {
		t.Fatal(err)
	}
	if err := Text(&b, reused, false); err != nil {
		t.Fatal(err)
	}
	if a.String() != b.String() {
		t.Fatalf("the validator's secrets render differently:\n--- own walk\n%s\n--- validator's secrets\n%s", a.String(), b.String())
	}
	for _, secret := range []string{"hunter2-Correct-Horse", "AKIAIOSFODNN7EXAMPLE"} {
		if strings.Contains(b.String(), secret) {
			t.Fatalf("%q is shown", secret)
		}
	}
}

// A verified change's section shows its verification: the phase, who
// settled it and why, and the measurements as evidence (untrusted text
// stays inert).
func TestMarkdown_showsTheVerification(t *testing.T) {
	cr := testChange()
	cr.Status.Phase = sluicev1.PhaseVerified
	at := metav1.NewMicroTime(time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC))
	cr.Status.Verification = &sluicev1.VerificationStatus{Message: "error-rate 2/2 measured, 0 failed",
		Settled: &sluicev1.VerificationSettlement{Approver: "k8s:alice", Reason: "quiet <b>night</b>"},
		Measurements: []sluicev1.Measurement{
			{Check: "error-rate", Phase: sluicev1.MeasurementInconclusive, Message: "no series | x", Query: "q", Time: at},
			{Check: "error-rate", Phase: sluicev1.MeasurementSuccessful, Value: "0.001", Query: "q", Time: at},
		}}
	s, err := Build(Input{Change: cr})
	if err != nil {
		t.Fatal(err)
	}
	md := strings.Join(Markdown([]*Section{s}, 60000, 1), "\n")
	for _, want := range []string{"**Verification**: Verified", "settled by `k8s:alice`: quiet &lt;b&gt;night&lt;/b&gt;",
		"| error-rate | Inconclusive |  | 2026-12-04T12:00:00Z | no series \\| x |", "| error-rate | Successful | `0.001` |"} {
		if !strings.Contains(md, want) {
			t.Errorf("the comment does not show %q:\n%s", want, md)
		}
	}
	if none, _ := Build(Input{Change: testChange()}); none.Verification != nil {
		t.Fatal("a change not verified shows a verification")
	}
}
