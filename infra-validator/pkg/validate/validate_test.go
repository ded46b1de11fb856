package validate

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

const repo = "testdata/repo"

func newValidator(t testing.TB) *Validator {
	t.Helper()
	v, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return v
}

// copyRepo copies the sample checkout, so terraform runs never write into testdata.
func copyRepo(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(repo)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func needTerraform(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatal("terraform is not on PATH; the Terraform tests need it (DESIGN.md §8)")
	}
}

func has(fs []report.Finding, policy, contains string) bool {
	for _, f := range fs {
		if f.Policy == policy && strings.Contains(f.Message, contains) {
			return true
		}
	}
	return false
}

// TestCheckService_prodEnvironmentOneResult: chart + plan give one verdict
// with every digest, and the secret planted in the prod values (rendered into
// a ConfigMap) is named by key but appears in no finding.
func TestCheckService_prodEnvironmentOneResult(t *testing.T) {
	needTerraform(t)
	root := copyRepo(t)
	v := newValidator(t)
	res, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/web", Environment: "prod"})
	if err != nil {
		t.Fatalf("CheckService: %v", err)
	}
	if !strings.HasPrefix(res.ManifestDigest, "sha256:") || !strings.HasPrefix(res.PlanDigest, "sha256:") || !strings.HasPrefix(res.PlanFileSHA256, "sha256:") {
		t.Fatalf("digests: manifest %q plan %q planfile %q", res.ManifestDigest, res.PlanDigest, res.PlanFileSHA256)
	}
	if len(res.PlanFile) == 0 || len(res.PlanJSON) == 0 || res.PlanSummary == nil || res.PlanSummary.Add != 1 {
		t.Fatalf("plan: %d bytes, summary %+v", len(res.PlanFile), res.PlanSummary)
	}
	fs := res.Verdict.Findings
	if res.Verdict.Result != report.ResultFail {
		t.Fatalf("the planted key must fail the prod check: %+v", res.Verdict)
	}
	if !has(fs, "sluice.kubernetes.secrets/deny", `"AWS_ACCESS_KEY_ID"`) {
		t.Fatalf("secret policy must name the key: %+v", fs)
	}
	if !has(fs, "sluice.kubernetes.availability/warn", "1 replica") || !has(fs, "sluice.kubernetes_combined.pdb/warn", "PodDisruptionBudget") {
		t.Fatalf("prod availability warnings missing: %+v", fs)
	}
	raw, _ := json.Marshal(res.Verdict)
	if strings.Contains(string(raw), "AKIAPLANTEDSECRET123") {
		t.Fatalf("planted secret leaked: %s", raw)
	}
	for _, f := range fs {
		if f.Resource == "ConfigMap/web-prod/web-prod" && f.File == "" {
			t.Fatalf("policy findings on chart objects carry the template file: %+v", f)
		}
	}
}

func TestCheckService_stagingHasNoProductionWarnings(t *testing.T) {
	needTerraform(t)
	root := copyRepo(t)
	res, err := newValidator(t).CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/web", Environment: "staging"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range res.Verdict.Findings {
		if f.Severity == report.SeverityDeny || strings.Contains(f.Policy, "availability") || strings.Contains(f.Policy, "pdb") {
			t.Fatalf("staging: unexpected %+v", f)
		}
	}
}

func TestCheckService_badRequests(t *testing.T) {
	v := newValidator(t)
	ctx := context.Background()
	_, err := v.CheckService(ctx, ServiceRequest{RepoRoot: repo, ServiceDir: "services/web", Environment: "qa"})
	if err == nil || !strings.Contains(err.Error(), `no environment "qa"`) {
		t.Fatalf("unknown environment: %v", err)
	}
	_, err = v.CheckService(ctx, ServiceRequest{RepoRoot: repo, ServiceDir: "services/missing", Environment: "prod"})
	if err == nil {
		t.Fatal("missing service must fail")
	}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "svc"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "svc", "service.yaml"), []byte("apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: x\nbogus: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = v.CheckService(ctx, ServiceRequest{RepoRoot: dir, ServiceDir: "svc", Environment: "prod"})
	var me *manifest.Error
	if !errors.As(err, &me) {
		t.Fatalf("bad manifest must be a *manifest.Error, got %v", err)
	}
}

func TestCheckChart_schemaViolationIsAFinding(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("replicas: lots\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := newValidator(t).CheckChart(context.Background(), ChartRequest{
		Chart: filepath.Join(repo, "charts/web"), ValuesFiles: []string{bad}, ReleaseName: "web", Namespace: "shop",
	})
	if err != nil {
		t.Fatalf("a schema violation is a finding, not an error: %v", err)
	}
	if res.Verdict.Result != report.ResultFail {
		t.Fatalf("schema violation must fail: %+v", res.Verdict)
	}
}

// TestValidator_concurrentChecksShareOneEngine: the syncer reuses one
// Validator from several goroutines.
func TestValidator_concurrentChecksShareOneEngine(t *testing.T) {
	v := newValidator(t)
	plan, err := os.ReadFile("../../internal/cli/testdata/conftest/inputs/plan.json")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 4; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if _, err := v.CheckPlanJSON(ctx, "plan.json", plan); err != nil {
				errs <- err
			}
		}()
		go func() {
			defer wg.Done()
			if _, err := v.CheckChart(ctx, ChartRequest{Chart: filepath.Join(repo, "charts/web"), ReleaseName: "web", Namespace: "shop"}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestRenderService_previousRenderRatesAReplicasChangeLow: the render of
// the previous revision is what CheckService renders (same digest), and
// passed as PreviousManifest it rates a replicas-only change low, where
// without it every object counts as new.
func TestRenderService_previousRenderRatesAReplicasChangeLow(t *testing.T) {
	root := copyRepo(t)
	v := newValidator(t)
	ctx := context.Background()
	req := ServiceRequest{RepoRoot: root, ServiceDir: "services/web", Environment: "staging", SkipTerraform: true}
	prev, err := v.RenderService(ctx, req)
	if err != nil {
		t.Fatalf("RenderService: %v", err)
	}
	same, err := v.CheckService(ctx, req)
	if err != nil {
		t.Fatalf("CheckService: %v", err)
	}
	if prev.ManifestDigest != same.ManifestDigest {
		t.Fatalf("render-only digest %s differs from CheckService's %s", prev.ManifestDigest, same.ManifestDigest)
	}
	if same.Verdict.Risk != report.RiskMedium {
		t.Errorf("without a previous manifest the risk is %s, want medium (new objects)", same.Verdict.Risk)
	}

	values := filepath.Join(root, "services/web/values-staging.yaml")
	if err := os.WriteFile(values, []byte("replicas: 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	req.PreviousManifest = prev.Manifest
	next, err := v.CheckService(ctx, req)
	if err != nil {
		t.Fatalf("CheckService: %v", err)
	}
	if next.ManifestDigest == prev.ManifestDigest {
		t.Fatal("the replicas change did not change the manifest")
	}
	if next.Verdict.Risk != report.RiskLow {
		t.Errorf("replicas-only change against the previous render: risk %s (%v), want low", next.Verdict.Risk, next.Chart.Render.RiskReasons)
	}
}

func TestRenderService_aChartThatDoesNotRenderIsAnError(t *testing.T) {
	root := copyRepo(t)
	if err := os.WriteFile(filepath.Join(root, "charts/web/templates/broken.yaml"), []byte("{{ .Values.nope.deeper }}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newValidator(t).RenderService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/web", Environment: "staging"})
	if !errors.Is(err, ErrNotRendered) {
		t.Fatalf("err = %v, want ErrNotRendered", err)
	}
}

// TestCheckService_aBrokenStackIsATerraformConfigurationError: the
// syncer tells a wrong stack (rejected, not retried) from a failing
// back end through ErrTerraformConfiguration and *terraform.RunError.
func TestCheckService_aBrokenStackIsATerraformConfigurationError(t *testing.T) {
	needTerraform(t)
	root := copyRepo(t)
	if err := os.WriteFile(filepath.Join(root, "services/web/terraform/main.tf"), []byte("resource \"terraform_data\" \"a\" {\n  input = \n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := newValidator(t).CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/web", Environment: "staging"})
	if !errors.Is(err, ErrTerraformConfiguration) {
		t.Fatalf("err = %v, want ErrTerraformConfiguration", err)
	}
	var re *terraform.RunError
	if !errors.As(err, &re) || len(re.Diagnostics) == 0 || re.Diagnostics[0].File != "main.tf" || re.Diagnostics[0].Line == 0 {
		t.Fatalf("want diagnostics at main.tf:<line>, got %v", err)
	}
}
