package validate

import (
	"context"
	"os"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// FuzzCheckPlanJSON: any plan JSON gives a verdict or an error, never a
// panic, through the plan reader, the analysis, the default policies and the
// redaction pass.
func FuzzCheckPlanJSON(f *testing.F) {
	seed, err := os.ReadFile("../../internal/cli/testdata/conftest/inputs/plan.json")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte(`{"format_version":"1.2","resource_changes":[{"address":"a.b","mode":"managed","type":"aws_security_group","name":"b","change":{"actions":["create"],"after":{"ingress":"not-a-list"},"after_unknown":{"ingress":[true]}}}]}`))
	f.Add([]byte(`{"format_version":"1.2","resource_changes":[{"type":"aws_s3_bucket_policy","mode":"managed","change":{"actions":["update"],"after":{"policy":"{\"Statement\":\"x\"}"}}}]}`))
	f.Add([]byte(`{"format_version":"1.2","resource_changes":[{"type":"aws_instance","mode":"managed","change":{"actions":"create","after":[],"after_unknown":true}}]}`))
	f.Add([]byte(`{"format_version":"1.2","resource_changes":null}`))
	f.Add([]byte(`{"format_version":"2.0"}`))
	f.Add([]byte(`[`))
	v, err := New(context.Background(), Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		res, err := v.CheckPlanJSON(context.Background(), "plan.json", data)
		if err != nil {
			return
		}
		switch res.Verdict.Result {
		case report.ResultPass, report.ResultWarn, report.ResultFail:
		default:
			t.Fatalf("bad result %q", res.Verdict.Result)
		}
	})
}
