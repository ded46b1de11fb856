package review

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-gitops/sluice/infra-validator/internal/benchdata"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
)

// BenchmarkReview2000 renders the pull-request comments (Build and
// Markdown, GitHub's limit) for the 2,000-resource plan from the plan the
// validator decoded (terraform.Report.Plan) and the secrets it found, as
// the syncer does. Compare
// with BenchmarkValidatePlan2000, the validation of the same plan: the
// rendering is meant to stay under 10% of it.
func BenchmarkReview2000(b *testing.B) {
	ctx := context.Background()
	v, err := validate.New(ctx, validate.Options{})
	if err != nil {
		b.Fatal(err)
	}
	check, err := v.CheckPlanJSON(ctx, "plan.json", benchdata.BigPlan(2000))
	if err != nil {
		b.Fatal(err)
	}
	benchReview(b, Input{Change: testChange(), Plan: check.Report.Plan, PlanSecrets: check.Secrets})
}

// BenchmarkReview2000FromJSON is BenchmarkReview2000 with the plan
// decoded from its JSON on every run.
func BenchmarkReview2000FromJSON(b *testing.B) {
	benchReview(b, Input{Change: testChange(), PlanJSON: benchdata.BigPlan(2000)})
}

func benchReview(b *testing.B, in Input) {
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		s, err := Build(in)
		if err != nil {
			b.Fatal(err)
		}
		if len(Markdown([]*Section{s}, LimitGitHub, 0)) == 0 {
			b.Fatal("no comment")
		}
	}
}

// BenchmarkValidatePlan2000 checks the 2,000-resource plan with the
// default policies compiled once, as the syncer does.
func BenchmarkValidatePlan2000(b *testing.B) {
	plan := benchdata.BigPlan(2000)
	ctx := context.Background()
	v, err := validate.New(ctx, validate.Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, err := v.CheckPlanJSON(ctx, "plan.json", plan); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReviewVsValidate2000 runs the validation of the 2,000-resource
// plan and the rendering of its comment in turn, each b.N times, and
// reports both CPU times per run and their ratio ("render-%": the
// rendering's CPU time as a percentage of the validation's; the target is
// under 10). Taking turns exposes both to the same load on a shared
// machine.
func BenchmarkReviewVsValidate2000(b *testing.B) {
	data := benchdata.BigPlan(2000)
	ctx := context.Background()
	v, err := validate.New(ctx, validate.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var validateCPU, renderCPU time.Duration
	for b.Loop() {
		start := cpuTime()
		rep, err := v.CheckPlanJSON(ctx, "plan.json", data)
		if err != nil {
			b.Fatal(err)
		}
		mid := cpuTime()
		s, err := Build(Input{Change: testChange(), Plan: rep.Report.Plan, PlanSecrets: rep.Secrets})
		if err != nil {
			b.Fatal(err)
		}
		if len(Markdown([]*Section{s}, LimitGitHub, 0)) == 0 {
			b.Fatal("no comment")
		}
		end := cpuTime()
		validateCPU += mid - start
		renderCPU += end - mid
	}
	if b.N > 0 && validateCPU > 0 {
		b.ReportMetric(float64(validateCPU.Nanoseconds())/float64(b.N), "validate-cpu-ns/op")
		b.ReportMetric(float64(renderCPU.Nanoseconds())/float64(b.N), "render-cpu-ns/op")
		b.ReportMetric(100*float64(renderCPU)/float64(validateCPU), "render-%")
	}
}

// reportCPU adds the process's CPU time per operation (user + system,
// all threads, GC included) as "cpu-ns/op": on a shared, loaded machine it
// varies much less than the wall-clock ns/op.
func reportCPU(b *testing.B) func() {
	start := cpuTime()
	return func() {
		if b.N > 0 {
			b.ReportMetric(float64((cpuTime()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
