package report

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func sample() *Report {
	findings := []Finding{
		{Severity: SeverityWarn, Source: "policy", Policy: "main/warn", Resource: "aws_instance.web", Message: "new resource", File: "plan.json"},
		{Severity: SeverityDeny, Source: "policy", Policy: "sluice.terraform.protected/deny", Resource: "aws_db_instance.main", Message: "would be destroyed"},
		{Severity: SeverityUnverifiable, Source: "policy", Policy: "sluice.terraform.encryption/unverifiable", Resource: "aws_instance.web", Message: "encrypted unknown"},
		{Severity: SeverityDeny, Source: "helm", Resource: "", Message: "template error", File: "templates/x.yaml", Line: 7},
	}
	return &Report{Tool: "infra-validator", Version: "v1", Sections: []Section{{
		Name: "terraform plan.json", File: "plan.json",
		Verdict: NewVerdict(MaxRisk(RiskMedium, RiskHigh), findings),
		Details: []Detail{{Key: "plan", Value: "1 to add, 0 to change, 1 to destroy"}},
	}}}
}

func TestNewVerdict_resultFollowsTheWorstSeverity(t *testing.T) {
	cases := []struct {
		name string
		sev  []Severity
		want Result
	}{
		{"no findings pass", nil, ResultPass},
		{"info only passes", []Severity{SeverityInfo}, ResultPass},
		{"a warning warns", []Severity{SeverityWarn, SeverityInfo}, ResultWarn},
		{"an unverifiable check warns, never passes", []Severity{SeverityUnverifiable}, ResultWarn},
		{"a deny fails", []Severity{SeverityWarn, SeverityDeny}, ResultFail},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var fs []Finding
			for _, s := range tc.sev {
				fs = append(fs, Finding{Severity: s, Message: "m"})
			}
			v := NewVerdict("", fs)
			if v.Result != tc.want || v.Risk != RiskLow || v.Findings == nil {
				t.Fatalf("got %+v, want result %s and risk low", v, tc.want)
			}
		})
	}
}

func TestFailOn(t *testing.T) {
	warn := []Finding{{Severity: SeverityUnverifiable}}
	if FailOnDeny.Fails(warn) || !FailOnWarn.Fails(warn) {
		t.Fatal("unverifiable fails only with --fail-on warn")
	}
	if !FailOnDeny.Fails([]Finding{{Severity: SeverityDeny}}) {
		t.Fatal("deny always fails")
	}
}

func TestWriteText_summaryThenFindingsGroupedByResource(t *testing.T) {
	var b bytes.Buffer
	if err := sample().Write(&b, FormatText, false); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(out, "\n")
	if lines[0] != "FAIL terraform plan.json: 2 deny, 1 unverifiable, 1 warn; risk high" {
		t.Fatalf("summary line: %q", lines[0])
	}
	if strings.Contains(out, "\x1b[") {
		t.Fatal("no colour unless asked")
	}
	web := strings.Index(out, "\n  aws_instance.web\n")
	unv := strings.Index(out, "UNVERIFIABLE encrypted unknown")
	warn := strings.Index(out, "WARN         new resource (main/warn, plan.json)")
	if web < 0 || unv < web || warn < unv {
		t.Fatalf("findings must be grouped under their resource, worst first:\n%s", out)
	}
	if !strings.Contains(out, "(no resource)") || !strings.Contains(out, "templates/x.yaml:7") {
		t.Fatalf("findings without resource and file:line must show:\n%s", out)
	}
	b.Reset()
	_ = sample().Write(&b, FormatText, true)
	if !strings.Contains(b.String(), "\x1b[31m") {
		t.Fatal("colour when asked")
	}
}

func TestWriteJSON_roundTrips(t *testing.T) {
	var b bytes.Buffer
	if err := sample().Write(&b, FormatJSON, false); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Sections) != 1 || back.Sections[0].Verdict.Result != ResultFail || len(back.Findings()) != 4 {
		t.Fatalf("round trip: %+v", back)
	}
}

func TestSARIF_isVersion210WithRulesAndLocations(t *testing.T) {
	var b bytes.Buffer
	if err := sample().Write(&b, FormatSARIF, false); err != nil {
		t.Fatal(err)
	}
	var log map[string]any
	if err := json.Unmarshal(b.Bytes(), &log); err != nil {
		t.Fatal(err)
	}
	if log["version"] != "2.1.0" || log["$schema"] != SARIFSchema {
		t.Fatalf("header: %v %v", log["version"], log["$schema"])
	}
	s := sample().SARIF()
	run := s.Runs[0]
	if len(run.Results) != 4 || len(run.Tool.Driver.Rules) != 4 {
		t.Fatalf("results %d rules %d", len(run.Results), len(run.Tool.Driver.Rules))
	}
	for _, r := range run.Results {
		if run.Tool.Driver.Rules[r.RuleIndex].ID != r.RuleID {
			t.Fatalf("ruleIndex mismatch for %s", r.RuleID)
		}
		if len(r.Locations) == 0 || r.Locations[0].PhysicalLocation == nil {
			t.Fatalf("every result needs a file location (section file as fallback): %+v", r)
		}
		switch r.Properties["severity"] {
		case "deny":
			if r.Level != "error" {
				t.Fatal("deny is error")
			}
		default:
			if r.Level != "warning" {
				t.Fatal("warn/unverifiable are warnings")
			}
		}
	}
}

func TestParseFormat(t *testing.T) {
	for _, ok := range []string{"text", "json", "sarif"} {
		if _, err := ParseFormat(ok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ParseFormat("xml"); err == nil {
		t.Fatal("xml is not a format")
	}
}

func TestListDetail_namesTheFirstItemsAndCountsTheRest(t *testing.T) {
	short := ListDetail("risk", []string{"a: delete", "b: create"})
	if short.Value != "a: delete; b: create" || len(short.Items) != 2 {
		t.Fatalf("short list: %+v", short)
	}
	items := []string{"r1", "r2", "r3", "r4", "r5", "r6", "r7"}
	long := ListDetail("risk", items)
	if long.Value != "r1; r2; r3; r4; r5; and 2 more" {
		t.Fatalf("long list value: %q", long.Value)
	}
	if strings.Join(long.Items, ",") != strings.Join(items, ",") {
		t.Fatalf("every item is kept: %v", long.Items)
	}
}
