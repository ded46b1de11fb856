package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const sampleRepo = "../../pkg/validate/testdata/repo"

// copyDir copies a folder tree (used so terraform never runs inside testdata).
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if info.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestRun_helmChartWithProdValues(t *testing.T) {
	chart := filepath.Join(sampleRepo, "charts/web")
	code, out, errOut := run(t, "helm", chart, "-f", filepath.Join(sampleRepo, "services/web/values-prod.yaml"), "--namespace", "shop-prod", "--release", "web")
	if code != ExitFailed {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	for _, want := range []string{"manifestDigest: sha256:", `key "AWS_ACCESS_KEY_ID"`, "Deployment/shop-prod/web", "templates/configmap.yaml"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out+errOut, "AKIAPLANTEDSECRET123") {
		t.Fatalf("planted secret leaked:\n%s", out)
	}
}

func TestRun_helmBadChartsAreReportsOrExit2(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "broken/Chart.yaml", "apiVersion: v2\nname: broken\nversion: 0.1.0\n")
	writeFile(t, dir, "broken/templates/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  a: {{ .Values.missing.field }}\n")
	code, out, errOut := run(t, "helm", filepath.Join(dir, "broken"))
	if code == ExitOK || strings.Contains(errOut, "internal error") {
		t.Fatalf("template error must fail cleanly: %d %s %s", code, out, errOut)
	}
	if code == ExitFailed && !strings.Contains(out, "templates/cm.yaml") {
		t.Fatalf("template error finding must name the template:\n%s", out)
	}
	bad := writeFile(t, dir, "bad-values.yaml", "replicas: many\n")
	code, out, errOut = run(t, "helm", filepath.Join(sampleRepo, "charts/web"), "-f", bad)
	if code != ExitFailed || !strings.Contains(out, "FAIL") {
		t.Fatalf("values breaking the schema must fail: %d %s %s", code, out, errOut)
	}
	if code, _, _ := run(t, "helm", filepath.Join(dir, "nope")); code != ExitBadUsage {
		t.Fatalf("missing chart: exit %d", code)
	}
}

func TestRun_checkEveryEnvironment(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatal("terraform is not on PATH")
	}
	root := copyDir(t, sampleRepo)
	code, out, errOut := run(t, "check", "--repo", root, filepath.Join(root, "services/web"))
	if code != ExitFailed {
		t.Fatalf("prod has a deny: exit %d %s %s", code, out, errOut)
	}
	staging := strings.Index(out, "PASS web/staging")
	prod := strings.Index(out, "FAIL web/prod")
	if staging < 0 || prod < staging || strings.Count(out, "planDigest: sha256:") != 2 || strings.Count(out, "manifestDigest: sha256:") != 2 {
		t.Fatalf("one section per environment with digests:\n%s", out)
	}
	for _, format := range []string{"text", "json", "sarif"} {
		_, out, errOut := run(t, "check", "--repo", root, "--no-terraform", "-o", format, filepath.Join(root, "services/web"))
		if strings.Contains(out+errOut, "AKIAPLANTEDSECRET123") || !strings.Contains(out, "AWS_ACCESS_KEY_ID") {
			t.Fatalf("%s: the planted secret must be named by key only:\n%s\n%s", format, out, errOut)
		}
	}
	if code, out, _ := run(t, "check", "--repo", root, "--env", "staging", filepath.Join(root, "services/web")); code != ExitOK || strings.Contains(out, "web/prod") {
		t.Fatalf("--env staging: %d\n%s", code, out)
	}
	if code, _, errOut := run(t, "check", "--repo", root, "--env", "qa", filepath.Join(root, "services/web")); code != ExitBadUsage || !strings.Contains(errOut, "qa") {
		t.Fatalf("unknown env: %d %s", code, errOut)
	}
}

func TestRun_checkBadManifestExit2WithLine(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "svc/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: svc\nowners: [a]\nchart: {path: charts/x}\nenvironments: []\nunknownField: true\n")
	code, _, errOut := run(t, "check", "--repo", dir, filepath.Join(dir, "svc"))
	if code != ExitBadUsage || !strings.Contains(errOut, "service.yaml") {
		t.Fatalf("bad manifest: %d %s", code, errOut)
	}
}
