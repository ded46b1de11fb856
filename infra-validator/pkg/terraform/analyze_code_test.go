package terraform

import (
	"encoding/json"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// codePlan is a plan of a module with an external data source, a
// provisioner of a resource the plan creates and one of a resource it
// keeps; the aws provider is in the prior state, the external one is not.
const codePlan = `{
  "format_version": "1.2",
  "prior_state": {"format_version": "1.0", "values": {"root_module": {"resources": [
    {"address": "aws_s3_bucket.b", "mode": "managed", "type": "aws_s3_bucket", "name": "b", "provider_name": "registry.terraform.io/hashicorp/aws"}
  ]}}},
  "resource_changes": [
    {"address": "module.app[0].terraform_data.queue", "module_address": "module.app[0]", "mode": "managed", "type": "terraform_data", "name": "queue",
     "provider_name": "terraform.io/builtin/terraform", "change": {"actions": ["create"], "before": null, "after": {}}},
    {"address": "aws_s3_bucket.b", "mode": "managed", "type": "aws_s3_bucket", "name": "b",
     "provider_name": "registry.terraform.io/hashicorp/aws", "change": {"actions": ["no-op"], "before": {}, "after": {}}}
  ],
  "configuration": {
    "provider_config": {
      "aws": {"name": "aws", "full_name": "registry.terraform.io/hashicorp/aws"},
      "external": {"name": "external", "full_name": "registry.terraform.io/hashicorp/external"}
    },
    "root_module": {
      "resources": [
        {"address": "aws_s3_bucket.b", "mode": "managed", "type": "aws_s3_bucket", "name": "b",
         "provisioners": [{"type": "local-exec", "expressions": {"command": {"constant_value": "echo kept"}}}]}
      ],
      "module_calls": {"app": {"source": "./app", "module": {"resources": [
        {"address": "terraform_data.queue", "mode": "managed", "type": "terraform_data", "name": "queue",
         "provisioners": [{"type": "local-exec", "expressions": {"command": {"references": ["self.input", "self"]}}}]},
        {"address": "data.external.x", "mode": "data", "type": "external", "name": "x",
         "expressions": {"program": {"constant_value": ["sh", "-c", "cat /etc/hosts"]}}}
      ]}}}
    }
  }
}`

func TestExecutedCode_listsWhatRunsAndRatesItHigh(t *testing.T) {
	var plan tfjson.Plan
	if err := json.Unmarshal([]byte(codePlan), &plan); err != nil {
		t.Fatal(err)
	}
	got := map[string]Code{}
	for _, c := range ExecutedCode(&plan) {
		got[string(c.Kind)+" "+c.Address] = c
	}
	want := map[string]struct {
		runs bool
		text string
	}{
		"external module.app.data.external.x":               {true, `program = ["sh","-c","cat /etc/hosts"]`},
		"provisioner module.app.terraform_data.queue":       {true, "command = (built from self.input, self)"},
		"provisioner aws_s3_bucket.b":                       {false, "command = echo kept"},
		"provider registry.terraform.io/hashicorp/external": {true, ""},
	}
	if len(got) != len(want) {
		t.Errorf("code %v, want the %d of %v", got, len(want), want)
	}
	for k, w := range want {
		c, ok := got[k]
		if !ok {
			t.Errorf("%s is not listed", k)
			continue
		}
		if c.Runs != w.runs || strings.Join(c.Text, "; ") != w.text {
			t.Errorf("%s: runs %v text %q, want %v %q", k, c.Runs, c.Text, w.runs, w.text)
		}
	}

	r, err := AnalyzePlan(&plan, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Risk != report.RiskHigh {
		t.Errorf("risk %s, want high", r.Risk)
	}
	n := 0
	for _, f := range r.Findings {
		if f.Policy == "terraform.executes_code" {
			n++
		}
	}
	if n != 3 {
		t.Errorf("%d executes_code findings, want 3 (the kept resource's provisioner does not run): %+v", n, r.Findings)
	}
}
