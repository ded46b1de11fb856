package terraform

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

func fixture(t testing.TB, name string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestAnalyze_awsFixtures(t *testing.T) {
	tests := []struct {
		file        string
		counts      Counts
		risk        report.Risk
		resources   map[string]Action
		unverified  []string // "address: message prefix"
		reasonsHave string
	}{
		{
			file:      "aws_mixed.json",
			counts:    Counts{Create: 2, Update: 1, NoOp: 1},
			risk:      report.RiskMedium,
			resources: map[string]Action{"aws_s3_bucket.assets": ActionCreate, "aws_security_group.web": ActionCreate, "aws_instance.api": ActionUpdate},
			// ingress is known: the cidr_blocks there are plain values.
			reasonsHave: "aws_s3_bucket.assets: create",
		},
		{
			file:        "aws_destroy.json",
			counts:      Counts{Replace: 1, Delete: 2},
			risk:        report.RiskHigh,
			resources:   map[string]Action{"aws_db_instance.main": ActionReplace, "aws_instance.bastion": ActionDelete, "aws_iam_role_policy.ci": ActionDelete},
			reasonsHave: "aws_db_instance.main: replace of a stateful resource",
		},
		{
			file:       "aws_unknown.json",
			counts:     Counts{Create: 1, Update: 1},
			risk:       report.RiskMedium,
			resources:  map[string]Action{"aws_security_group_rule.ingress": ActionCreate, `aws_ebs_volume.data["a"]`: ActionUpdate},
			unverified: []string{"aws_security_group_rule.ingress: cidr_blocks is unknown", `aws_ebs_volume.data["a"]: encrypted is unknown`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			r, err := Analyze(fixture(t, tt.file), Options{})
			if err != nil {
				t.Fatalf("Analyze: %v", err)
			}
			if r.Counts != tt.counts {
				t.Errorf("counts = %+v, want %+v", r.Counts, tt.counts)
			}
			if r.Risk != tt.risk {
				t.Errorf("risk = %s, want %s (%v)", r.Risk, tt.risk, r.RiskReasons)
			}
			got := map[string]Action{}
			for _, res := range r.Resources {
				got[res.Address] = res.Action
			}
			if !reflect.DeepEqual(got, tt.resources) {
				t.Errorf("resources = %v, want %v", got, tt.resources)
			}
			var unverified []string
			for _, f := range r.Findings {
				if f.Severity == report.SeverityUnverifiable {
					unverified = append(unverified, f.Resource+": "+f.Message)
				}
			}
			if len(unverified) != len(tt.unverified) {
				t.Fatalf("unverifiable findings = %q, want %d", unverified, len(tt.unverified))
			}
			for i, want := range tt.unverified {
				if !strings.HasPrefix(unverified[i], want) {
					t.Errorf("finding %q does not start with %q", unverified[i], want)
				}
			}
			if tt.reasonsHave != "" && !strings.Contains(strings.Join(r.RiskReasons, "\n"), tt.reasonsHave) {
				t.Errorf("risk reasons %q lack %q", r.RiskReasons, tt.reasonsHave)
			}
			if !strings.HasPrefix(r.PlanDigest, "sha256:") || len(r.PlanDigest) != 71 {
				t.Errorf("plan digest %q", r.PlanDigest)
			}
		})
	}
}

func TestAnalyze_protectedTagAndTypeMakeDestroyHigh(t *testing.T) {
	r, err := Analyze(fixture(t, "aws_destroy.json"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	byAddr := map[string]Resource{}
	for _, res := range r.Resources {
		byAddr[res.Address] = res
	}
	if b := byAddr["aws_instance.bastion"]; !b.Protected || b.Risk != report.RiskHigh {
		t.Errorf("bastion tagged protected=true: %+v", b)
	}
	if db := byAddr["aws_db_instance.main"]; !db.Stateful || db.Risk != report.RiskHigh {
		t.Errorf("database replace: %+v", db)
	}
	if p := byAddr["aws_iam_role_policy.ci"]; p.Risk != report.RiskMedium {
		t.Errorf("an ordinary delete should be medium: %+v", p)
	}
	// A type made protected by configuration.
	r, err = Analyze(fixture(t, "aws_destroy.json"), Options{ProtectedTypes: []string{"aws_iam_*"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, res := range r.Resources {
		if res.Address == "aws_iam_role_policy.ci" && (!res.Protected || res.Risk != report.RiskHigh) {
			t.Errorf("configured protected type: %+v", res)
		}
	}
	// No finding or reason repeats a value from the plan, sensitive or not.
	out, _ := json.Marshal(r)
	if bytes.Contains(out, []byte("hunter2")) {
		t.Error("the report repeats a sensitive value")
	}
}

func TestAnalyze_onlyUpdatesIsLowRisk(t *testing.T) {
	plan := `{"format_version":"1.2","resource_changes":[{"address":"aws_instance.a","mode":"managed","type":"aws_instance","name":"a",
	"provider_name":"registry.terraform.io/hashicorp/aws","change":{"actions":["update"],"before":{"instance_type":"t3.micro"},"after":{"instance_type":"t3.small"},"after_unknown":{}}}]}`
	r, err := Analyze([]byte(plan), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Risk != report.RiskLow || len(r.Findings) != 0 {
		t.Errorf("risk %s, findings %v", r.Risk, r.Findings)
	}
	// The same update on an access-granting type is medium.
	r, err = Analyze([]byte(strings.ReplaceAll(plan, "aws_instance", "aws_iam_policy")), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Risk != report.RiskMedium {
		t.Errorf("IAM update risk %s", r.Risk)
	}
}

func TestAnalyze_erroredOrIncompletePlanNeverPasses(t *testing.T) {
	errored := strings.Replace(string(fixture(t, "aws_mixed.json")), `"errored": false`, `"errored": true`, 1)
	r, err := Analyze([]byte(errored), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Risk != report.RiskHigh || len(r.Findings) == 0 || r.Findings[0].Severity != report.SeverityDeny {
		t.Errorf("errored plan: risk %s findings %v", r.Risk, r.Findings)
	}
	incomplete := strings.Replace(string(fixture(t, "aws_mixed.json")), `"complete": true`, `"complete": false`, 1)
	r, err = Analyze([]byte(incomplete), Options{})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range r.Findings {
		found = found || f.Severity == report.SeverityUnverifiable
	}
	if r.Risk != report.RiskHigh || !found {
		t.Errorf("incomplete plan: risk %s findings %v", r.Risk, r.Findings)
	}
}

func TestReadPlan_rejectsBadInputClearly(t *testing.T) {
	tests := []struct {
		name, json, want string
	}{
		{"malformed JSON", `{"format_version": "1.2", "resource_changes": [`, "plan JSON: line 1"},
		{"a future format", string(fixture(t, "future_format.json")), `unsupported plan format_version "2.0"`},
		{"no format version", `{"resource_changes": []}`, "no format_version"},
		{"a state instead of a plan", `{"version": 4, "terraform_version": "1.9.8"}`, "no format_version"},
		{"an empty input", "  ", "empty"},
		{"a null resource change", `{"format_version":"1.2","resource_changes":[null]}`, "resource_changes[0] has no change"},
		{"a change without address", `{"format_version":"1.2","resource_changes":[{"change":{"actions":["create"]}}]}`, "no address"},
		{"a null output change", `{"format_version":"1.2","output_changes":{"x":null}}`, `output_changes["x"] is null`},
		{"a wrong type", `{"format_version":"1.2","resource_changes":{"a":1}}`, "cannot unmarshal"},
		{"an array", `[]`, "cannot unmarshal"},
		{"a version that is no number", `{"format_version":"x.1"}`, "not a version number"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadPlan([]byte(tt.json))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
			if _, err := Analyze([]byte(tt.json), Options{}); err == nil {
				t.Fatal("Analyze accepted it")
			}
		})
	}
	_, err := ReadPlan(fixture(t, "future_format.json"))
	if !errors.Is(err, ErrUnsupportedFormat) {
		t.Errorf("future format error does not wrap ErrUnsupportedFormat: %v", err)
	}
}

func TestPlanDigest_ignoresVolatileFieldsAndOrder(t *testing.T) {
	base := fixture(t, "aws_mixed.json")
	d0, err := PlanDigest(base)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(base, &doc); err != nil {
		t.Fatal(err)
	}
	doc["timestamp"] = "2030-01-01T00:00:00Z"
	doc["terraform_version"] = "1.11.4"
	rcs := doc["resource_changes"].([]any)
	for i, j := 0, len(rcs)-1; i < j; i, j = i+1, j-1 {
		rcs[i], rcs[j] = rcs[j], rcs[i]
	}
	// A no-op resource that changed in state does not change the effect.
	rcs[0].(map[string]any)["change"].(map[string]any)["before"] = map[string]any{"name": "renamed"}
	rcs[0].(map[string]any)["change"].(map[string]any)["after"] = map[string]any{"name": "renamed"}
	rcs[1].(map[string]any)["action_reason"] = "replace_by_request"
	same, _ := json.MarshalIndent(doc, "", "    ")
	d1, err := PlanDigest(same)
	if err != nil {
		t.Fatal(err)
	}
	if d0 != d1 {
		t.Errorf("digest changed with volatile fields: %s vs %s", d0, d1)
	}
	// One value changes the digest.
	changed := bytes.Replace(base, []byte(`"t3.small"`), []byte(`"t3.medium"`), 1)
	d2, err := PlanDigest(changed)
	if err != nil {
		t.Fatal(err)
	}
	if d2 == d0 {
		t.Error("a changed value kept the digest")
	}
	// Numbers are compared exactly, not as float64.
	a := `{"format_version":"1.2","resource_changes":[{"address":"x.y","change":{"actions":["create"],"after":{"n":9007199254740993}}}]}`
	b := strings.Replace(a, "9007199254740993", "9007199254740992", 1)
	da, _ := PlanDigest([]byte(a))
	db, _ := PlanDigest([]byte(b))
	if da == db {
		t.Error("large integers collide in the digest")
	}
}

func TestUnknownPathsAndIsUnknown(t *testing.T) {
	plan, err := ReadPlan(fixture(t, "aws_mixed.json"))
	if err != nil {
		t.Fatal(err)
	}
	sg := plan.ResourceChanges[1]
	if got, want := UnknownPaths(sg), []string{"arn", "egress", "id", "owner_id", "tags_all", "vpc_id"}; !reflect.DeepEqual(got, want) {
		t.Errorf("UnknownPaths = %v, want %v", got, want)
	}
	for path, want := range map[string]bool{
		"ingress": false, "ingress.*.cidr_blocks": false, "ingress[0].cidr_blocks": false,
		"egress": true, "egress.*.cidr_blocks": true, "vpc_id": true, "name": false,
	} {
		if got := IsUnknown(sg, path); got != want {
			t.Errorf("IsUnknown(%q) = %v, want %v", path, got, want)
		}
	}
}

// bigPlan builds plan JSON with n resource changes of mixed actions.
func bigPlan(n int) []byte {
	var b bytes.Buffer
	b.WriteString(`{"format_version":"1.2","terraform_version":"1.11.4","resource_changes":[`)
	actions := []string{`["create"]`, `["update"]`, `["delete"]`, `["delete","create"]`, `["no-op"]`}
	for i := 0; i < n; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		typ := "aws_instance"
		if i%7 == 0 {
			typ = "aws_s3_bucket"
		}
		fmt.Fprintf(&b, `{"address":"%s.r%d","mode":"managed","type":"%s","name":"r%d","provider_name":"registry.terraform.io/hashicorp/aws",`+
			`"change":{"actions":%s,"before":{"ami":"ami-0abc","instance_type":"t3.micro","tags":{"owner":"team","n":"%d"}},`+
			`"after":{"ami":"ami-0abc","instance_type":"t3.small","tags":{"owner":"team","n":"%d"}},"after_unknown":{"id":true,"arn":true},`+
			`"before_sensitive":{},"after_sensitive":{}}}`, typ, i, typ, i, actions[i%len(actions)], i, i)
	}
	b.WriteString(`],"output_changes":{"count":{"actions":["update"],"before":1,"after":2,"after_unknown":false}},"timestamp":"2026-11-29T10:00:00Z"}`)
	return b.Bytes()
}

func TestAnalyze_tenThousandResources(t *testing.T) {
	data := bigPlan(10000)
	r, err := Analyze(data, Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := Counts{Create: 2000, Update: 2000, Delete: 2000, Replace: 2000, NoOp: 2000}
	if r.Counts != want || len(r.Resources) != 8000 || r.Risk != report.RiskHigh {
		t.Errorf("counts %+v, resources %d, risk %s", r.Counts, len(r.Resources), r.Risk)
	}
	t.Logf("plan JSON %d bytes, peak RSS so far %s", len(data), peakRSS())
}

// peakRSS reads the process's peak resident set size (VmHWM) on Linux.
func peakRSS() string {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			return strings.TrimSpace(strings.TrimPrefix(line, "VmHWM:"))
		}
	}
	return "unknown"
}

func peakRSSKiB() float64 {
	var kib float64
	fmt.Sscanf(peakRSS(), "%f", &kib)
	return kib
}

// BenchmarkAnalyze10000 reads and analyses a 10,000-resource plan. It
// reports the process's peak RSS (VmHWM) and the bytes allocated per plan.
func BenchmarkAnalyze10000(b *testing.B) {
	data := bigPlan(10000)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Analyze(data, Options{}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(peakRSSKiB()/1024, "peak-RSS-MiB")
	b.ReportMetric(float64(len(data))/(1<<20), "plan-MiB")
}

// BenchmarkAnalyze2000 is the 2,000-resource plan of the bench script.
func BenchmarkAnalyze2000(b *testing.B) {
	data := bigPlan(2000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := Analyze(data, Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

func FuzzReadPlan(f *testing.F) {
	for _, name := range []string{"aws_mixed.json", "aws_destroy.json", "aws_unknown.json", "future_format.json"} {
		f.Add(fixture(f, name))
	}
	f.Add(bigPlan(3))
	f.Add([]byte(`{"format_version":"1.2","resource_changes":[{"address":"a","change":{"actions":["bogus"],"after_unknown":[true,{"x":true}]}}]}`))
	f.Add([]byte(`{"format_version":"1.2","output_changes":{"o":{"actions":["create"],"after_unknown":true}},"errored":true}`))
	f.Add([]byte(`{"format_version":"0.1"}`))
	f.Add([]byte(`{"format_version":"1.2","deferred_changes":[{"reason":"x"}],"complete":false}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Analyze(data, Options{})
		if err != nil {
			return
		}
		if !strings.HasPrefix(r.PlanDigest, "sha256:") {
			t.Fatalf("digest %q", r.PlanDigest)
		}
		for _, res := range r.Resources {
			_ = IsUnknown(nil, res.Address)
		}
		if r.Plan != nil {
			for _, rc := range r.Plan.ResourceChanges {
				_ = UnknownPaths(rc)
				_ = IsUnknown(rc, "*.*")
			}
		}
	})
}
