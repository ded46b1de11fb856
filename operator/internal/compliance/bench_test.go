package compliance

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"
)

// benchObjects are n live objects of one namespace as the scanner's
// informers hold them (slimmed): Deployments, StatefulSets, ConfigMaps,
// Pods and PodDisruptionBudgets; about one in five breaks a default
// policy (an image tagged latest, a plaintext password, a missing limit).
func benchObjects(n int, ns string) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, 0, n)
	for i := range n {
		name := fmt.Sprintf("obj-%05d", i)
		var obj map[string]any
		image := fmt.Sprintf("ghcr.io/acme/app-%d:1.%d.0", i%50, i%7)
		if i%5 == 0 {
			image = "ghcr.io/acme/app:latest"
		}
		container := map[string]any{
			"name": "app", "image": image,
			"resources":       map[string]any{"limits": map[string]any{"cpu": "1", "memory": "256Mi"}, "requests": map[string]any{"cpu": "100m", "memory": "128Mi"}},
			"securityContext": map[string]any{"runAsNonRoot": true, "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true},
			"env":             []any{map[string]any{"name": "LOG_LEVEL", "value": "info"}},
		}
		podSpec := map[string]any{"containers": []any{container}}
		labels := map[string]any{"app": name}
		switch i % 5 {
		case 0, 1:
			obj = map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "spec": map[string]any{
				"replicas": int64(2), "selector": map[string]any{"matchLabels": labels},
				"template": map[string]any{"metadata": map[string]any{"labels": labels}, "spec": podSpec},
			}}
		case 2:
			data := map[string]any{"LOG_LEVEL": "info", "FEATURES": "a,b,c"}
			if i%10 == 2 {
				data["DB_PASSWORD"] = fmt.Sprintf("plaintext-%08d", i)
			}
			obj = map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "data": data}
		case 3:
			obj = map[string]any{"apiVersion": "v1", "kind": "Pod", "spec": podSpec}
		case 4:
			obj = map[string]any{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "spec": map[string]any{
				"minAvailable": int64(1), "selector": map[string]any{"matchLabels": map[string]any{"app": fmt.Sprintf("obj-%05d", i-3)}},
			}}
		}
		obj["metadata"] = map[string]any{"name": name, "namespace": ns, "uid": fmt.Sprintf("uid-%05d", i), "resourceVersion": "1", "labels": labels}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	return out
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCompliancePass is a full compliance pass over 10,000 live
// objects of one namespace (COMPLIANCE_OBJECTS overrides) with the default
// bundle: every object evaluated (the per-object policies) plus the
// combined policies over all of them, and the Report built. It reports
// the CPU time per pass and per object, and the CPU time of a pass that
// finds nothing changed (only the combined policies and the Report). With
// CONFTEST set to a conftest binary, it also exports the same objects to
// files, one per object, and runs `conftest test` over them with the same
// policies and data (the per-object namespaces, then --combine for the
// combined one), reporting its CPU time side by side and checking both
// found the same number of failures and warnings.
func BenchmarkCompliancePass(b *testing.B) {
	n := 10000
	if v := os.Getenv("COMPLIANCE_OBJECTS"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	engine, digest, err := LoadBundle(ctx, BundleOptions)
	if err != nil {
		b.Fatal(err)
	}
	objs := benchObjects(n, "shop-prod")
	var findings int
	var rep int
	b.ResetTimer()
	cpu0 := cpuTime()
	for b.Loop() {
		ev := &Evaluator{Engine: engine}
		outcomes, combined := ev.Evaluate(ctx, objs, true)
		r := Build(Input{Namespace: "shop-prod", BundleDigest: digest, Objects: objs, Outcomes: outcomes, Combined: combined, Now: time.Now()})
		rep = r.Summary.Fail + r.Summary.Warn + r.Summary.Error
		findings = countFindings(outcomes, combined)
	}
	cpu := cpuTime() - cpu0
	b.StopTimer()
	perPass := cpu / time.Duration(b.N)
	b.ReportMetric(float64(perPass.Milliseconds()), "cpu-ms/pass")
	b.ReportMetric(float64(perPass.Microseconds())/float64(n), "cpu-us/object")
	b.ReportMetric(float64(findings), "findings")
	b.ReportMetric(float64(rep), "results")

	// A pass with nothing changed: cached outcomes, the combined policies
	// and the Report only.
	ev := &Evaluator{Engine: engine}
	outcomes, _ := ev.Evaluate(ctx, objs, true)
	prev := Build(Input{Namespace: "shop-prod", BundleDigest: digest, Objects: objs, Outcomes: outcomes, Now: time.Now()})
	c0 := cpuTime()
	const unchanged = 3
	for range unchanged {
		outcomes, combined := ev.Evaluate(ctx, objs, false)
		Build(Input{Namespace: "shop-prod", BundleDigest: digest, Objects: objs, Outcomes: outcomes, Combined: combined, Previous: prev, Now: time.Now()})
	}
	b.ReportMetric(float64((cpuTime()-c0).Milliseconds())/unchanged, "unchanged-cpu-ms/pass")

	conftest := os.Getenv("CONFTEST")
	if conftest == "" {
		return
	}
	dir := b.TempDir()
	for _, o := range objs {
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, o.GetName()+".yaml"), y, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	root, err := filepath.Abs("../../../policies")
	if err != nil {
		b.Fatal(err)
	}
	base := []string{"test", "--no-color", "-o", "json", "--policy", filepath.Join(root, "rego"), "--data", filepath.Join(root, "data", "defaults.yaml")}
	perDoc, perDocCPU, perDocWall := runConftest(b, conftest, append(append(base, "--namespace", "sluice.kubernetes.*"), dir))
	comb, combCPU, combWall := runConftest(b, conftest, append(append(base, "--combine", "--namespace", "sluice.kubernetes_combined.*"), dir))
	total := perDocCPU + combCPU
	b.ReportMetric(float64(total.Milliseconds()), "conftest-cpu-ms/pass")
	b.ReportMetric(float64(total.Microseconds())/float64(n), "conftest-cpu-us/object")
	b.ReportMetric(float64((perDocWall + combWall).Milliseconds()), "conftest-wall-ms/pass")
	b.ReportMetric(float64(perDoc+comb), "conftest-findings")
	if perDoc+comb != findings {
		b.Errorf("conftest found %d failures and warnings, the compliance pass %d: not the same bundle", perDoc+comb, findings)
	}
}

// countFindings counts the findings of a pass.
func countFindings(outcomes map[types.UID]Outcome, combined Outcome) int {
	n := len(combined.Findings)
	for _, oc := range outcomes {
		n += len(oc.Findings)
	}
	return n
}

// runConftest runs conftest and returns the failures and warnings it
// printed, its CPU time and its wall time.
func runConftest(b *testing.B, bin string, args []string) (int, time.Duration, time.Duration) {
	b.Helper()
	cmd := exec.Command(bin, args...)
	start := time.Now()
	out, err := cmd.Output()
	wall := time.Since(start)
	var exit *exec.ExitError
	if err != nil && !(errors.As(err, &exit) && exit.ExitCode() == 1) { // 1: failures found
		b.Fatalf("conftest %v: %v", args, err)
	}
	var results []struct {
		Failures []json.RawMessage `json:"failures"`
		Warnings []json.RawMessage `json:"warnings"`
	}
	if err := json.Unmarshal(out, &results); err != nil {
		b.Fatalf("conftest output: %v", err)
	}
	n := 0
	for _, r := range results {
		n += len(r.Failures) + len(r.Warnings)
	}
	st := cmd.ProcessState
	return n, st.UserTime() + st.SystemTime(), wall
}
