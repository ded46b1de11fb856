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

// BenchmarkCheckChart measures one chart check (values schema, render,
// strict decoding, policies) with policies compiled once. CHART_DIR names the
// chart (default: the sample chart), rendered with its own values.yaml.
func BenchmarkCheckChart(b *testing.B) {
	chart := os.Getenv("CHART_DIR")
	if chart == "" {
		chart = "testdata/repo/charts/web"
	}
	ctx := context.Background()
	v, err := New(ctx, Options{Helm: HelmOptions{KubeVersion: "1.37.2"}})
	if err != nil {
		b.Fatal(err)
	}
	req := ChartRequest{Chart: chart, ValuesFiles: []string{chart + "/values.yaml"}, ReleaseName: "bench", Namespace: "shop-prod"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := v.CheckChart(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRenderService measures the render-only pass the syncer runs for
// a release's previous revision when it does not remember its manifest
// (the sample service's staging environment).
func BenchmarkRenderService(b *testing.B) {
	ctx := context.Background()
	v, err := New(ctx, Options{Helm: HelmOptions{KubeVersion: "1.37.2"}})
	if err != nil {
		b.Fatal(err)
	}
	req := ServiceRequest{RepoRoot: repo, ServiceDir: "services/web", Environment: "staging"}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := v.RenderService(ctx, req); err != nil {
			b.Fatal(err)
		}
	}
}
