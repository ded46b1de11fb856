package validate

import (
	"context"
	"os"
	"testing"
)

// BenchmarkCheckPlanJSON measures one plan check with policies compiled once,
// as the syncer runs it. PLAN_JSON names the plan (default: the conftest
// compatibility sample).
func BenchmarkCheckPlanJSON(b *testing.B) {
	path := os.Getenv("PLAN_JSON")
	if path == "" {
		path = "../../internal/cli/testdata/conftest/inputs/plan.json"
	}
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	v, err := New(ctx, Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := v.CheckPlanJSON(ctx, path, data); err != nil {
			b.Fatal(err)
		}
	}
}
