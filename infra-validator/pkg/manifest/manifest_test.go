package manifest

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const repo = "testdata/repo"

func readSample(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repo, "services/checkout/service.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestParse_designExampleIsAcceptedWithDefaults(t *testing.T) {
	svc, err := Parse(readSample(t), "services/checkout/service.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if svc.Name != "checkout" || len(svc.Environments) != 2 || svc.Chart.Path != "charts/service" {
		t.Fatalf("unexpected service: %+v", svc)
	}
	staging, prod := svc.Environments[0], svc.Environments[1]
	if staging.Delivery != DeliveryHelm || prod.Delivery != DeliveryArgoCD {
		t.Errorf("delivery: %q %q", staging.Delivery, prod.Delivery)
	}
	if staging.Approval.AutoApproveRisk != AutoApproveLow || prod.Approval.AutoApproveRisk != AutoApproveNone {
		t.Errorf("autoApproveRisk defaults: %q %q", staging.Approval.AutoApproveRisk, prod.Approval.AutoApproveRisk)
	}
	if staging.Approval.Rollback != RollbackApproval || prod.Approval.Rollback != RollbackApproval {
		t.Errorf("rollback defaults to approval: %q %q", staging.Approval.Rollback, prod.Approval.Rollback)
	}
	if got := staging.Terraform.Vars["env"]; got != "staging" || staging.Terraform.Workspace != "staging" {
		t.Errorf("terraform: %+v", staging.Terraform)
	}
	if !reflect.DeepEqual(prod.Approval.Approvers, []string{"k8s-group:sre", "github:alice"}) || prod.Approval.Required != 2 {
		t.Errorf("approval: %+v", prod.Approval)
	}
}

func TestParse_rejectsBadManifestsWithFileAndLine(t *testing.T) {
	base := string(readSample(t))
	tests := []struct {
		name, yaml, want string
		line             int
	}{
		{"an unknown top-level field", base + "extra: 1\n", "field extra not found", 21},
		{"an unknown field in an environment", strings.Replace(base, "    delivery: helm\n", "    delivery: helm\n    deliver: helm\n", 1), "field deliver not found", 14},
		{"a misspelt approval field", strings.Replace(base, "allowAuthor: false", "allowAuthors: false", 1), "field allowAuthors not found", 20},
		{"a wrong type", strings.Replace(base, "required: 2", "required: two", 1), "cannot unmarshal", 20},
		{"a service name that is not a DNS label", strings.Replace(base, "name: checkout ", "name: Check_out ", 1), "DNS label", 3},
		{"an environment name with a dash", strings.Replace(base, "name: staging", "name: stag-ing", 1), "no dashes", 9},
		{"a duplicate environment", strings.Replace(base, "name: prod", "name: staging", 1), "declared twice", 15},
		{"a namespace that is not a DNS label", strings.Replace(base, "namespace: checkout-prod", "namespace: Checkout.prod", 1), "DNS label", 16},
		{"an approver without a known prefix", strings.Replace(base, "github:alice", "alice", 1), "approver \"alice\"", 20},
		{"an email approver", strings.Replace(base, "github:alice", "email:a@example.com", 1), "approver", 20},
		{"an unknown delivery", strings.Replace(base, "delivery: argocd", "delivery: flux", 1), "helm or argocd", 19},
		{"an unknown rollback mode", strings.Replace(base, "autoApproveRisk: low", "autoApproveRisk: low, rollback: always", 1), "rollback \"always\" must be auto or approval", 14},
		{"an unknown auto-approve risk", strings.Replace(base, "autoApproveRisk: low", "autoApproveRisk: some", 1), "none, low, medium or high", 14},
		{"a values path with ..", strings.Replace(base, "values: [values.yaml]", "values: [../other/values.yaml]", 1), "'..'", 6},
		{"an absolute chart path", strings.Replace(base, "chart: {path: charts/service}", "chart: {path: /etc/charts}", 1), "relative", 5},
		{"a terraform dir with ..", strings.Replace(base, "terraform: {dir: terraform}", "terraform: {dir: terraform/../../x}", 1), "'..'", 7},
		{"a chart with both path and repo", strings.Replace(base, "chart: {path: charts/service}", "chart: {path: charts/service, repo: https://charts.example.com}", 1), "not both", 5},
		{"a chart repo without version", strings.Replace(base, "chart: {path: charts/service}", "chart: {repo: https://charts.example.com, name: x}", 1), "chart.version is required", 5},
		{"a chart repo over plain http", strings.Replace(base, "chart: {path: charts/service}", "chart: {repo: http://charts.example.com, name: x, version: 1.0.0}", 1), "https:// or oci://", 5},
		{"a chart repo URL with credentials", strings.Replace(base, "chart: {path: charts/service}", "chart: {repo: https://u:p@charts.example.com, name: x, version: 1.0.0}", 1), "credentials", 5},
		{"a chart version that is no version or range", strings.Replace(base, "chart: {path: charts/service}", "chart: {repo: https://charts.example.com, name: x, version: latest-please}", 1), "must be a version or a semver range", 5},
		{"a wrong apiVersion", strings.Replace(base, "sluice.dev/v1alpha1", "sluice.dev/v2", 1), "apiVersion must be", 1},
		{"a wrong kind", strings.Replace(base, "kind: Service", "kind: Deployment", 1), "kind must be", 2},
		{"a workspace with a slash", strings.Replace(base, "workspace: staging", "workspace: a/b", 1), "workspace", 12},
		{"a bad terraform var name", strings.Replace(base, "{env: prod}", "{\"9env\": prod}", 1), "not a valid identifier", 18},
		{"a duplicate key", strings.Replace(base, "owners: [team-payments]\n", "owners: [team-payments]\nowners: [x]\n", 1), "already defined", 5},
		{"a YAML syntax error", strings.Replace(base, "chart: {path: charts/service}", "chart: {path: charts/service", 1), "", 0},
		{"two documents", base + "---\nname: x\n", "exactly one YAML document", 0},
		{"no environments", base[:strings.Index(base, "environments:")], "at least one environment", 0},
		{"env terraform without a stack", strings.Replace(base, "terraform: {dir: terraform}\n", "", 1), "no terraform.dir", 0},
		{"a list instead of a mapping", "- a\n- b\n", "must be a YAML mapping", 1},
		{"an empty file", "", "empty", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml), "services/checkout/service.yaml")
			if err == nil {
				t.Fatal("Parse accepted the manifest")
			}
			var me *Error
			if !errors.As(err, &me) || len(me.Problems) == 0 {
				t.Fatalf("error is not a *manifest.Error: %T %v", err, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
			if !strings.HasPrefix(err.Error(), "services/checkout/service.yaml:") {
				t.Errorf("error %q does not name the file", err)
			}
			if tt.line > 0 {
				found := false
				for _, p := range me.Problems {
					found = found || p.Line == tt.line
				}
				if !found {
					t.Errorf("no problem on line %d: %v", tt.line, err)
				}
			}
		})
	}
}

func TestParse_reportsEveryProblemAtOnce(t *testing.T) {
	base := string(readSample(t))
	bad := strings.Replace(base, "name: staging", "name: stag-ing", 1)
	bad = strings.Replace(bad, "namespace: checkout-prod", "namespace: X", 1)
	_, err := Parse([]byte(bad), "")
	var me *Error
	if !errors.As(err, &me) || len(me.Problems) != 2 {
		t.Fatalf("want 2 problems, got %v", err)
	}
	if me.Problems[0].File != FileName {
		t.Errorf("default file name: %q", me.Problems[0].File)
	}
}

func TestLoad_resolvesRepoRelativePaths(t *testing.T) {
	svc, err := Load(repo, "services/checkout")
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	if svc.Dir != "services/checkout" || svc.File != "services/checkout/service.yaml" {
		t.Errorf("dir/file: %q %q", svc.Dir, svc.File)
	}
	vals, err := svc.ValuesFiles("prod")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"services/checkout/values.yaml", "services/checkout/values-prod.yaml"}
	if !reflect.DeepEqual(vals, want) {
		t.Errorf("ValuesFiles = %v, want %v", vals, want)
	}
	if _, err := svc.ValuesFiles("qa"); err == nil {
		t.Error("ValuesFiles of an unknown environment did not fail")
	}
	if svc.TerraformDir() != "services/checkout/terraform" || svc.ChartDir() != "charts/service" {
		t.Errorf("dirs: %q %q", svc.TerraformDir(), svc.ChartDir())
	}
}

func TestInputs_listsServiceChartAndLocalModulesRecursively(t *testing.T) {
	svc, err := Load(repo, "services/checkout")
	if err != nil {
		t.Fatal(err)
	}
	got, err := svc.Inputs(repo)
	if err != nil {
		t.Fatalf("Inputs: %v", err)
	}
	// The terraform folder is inside the service folder and the sub-module
	// inside modules/network, so both are covered by their parents.
	want := []string{"charts/service", "modules/network", "services/checkout"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Inputs = %v, want %v", got, want)
	}
	mods, err := TerraformModules(repo, "services/checkout/terraform")
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"modules/network", "modules/network/sub"}; !reflect.DeepEqual(mods, want) {
		t.Errorf("TerraformModules = %v, want %v", mods, want)
	}
}

// copyRepo copies the sample repository into a temp dir so a test can add
// symlinks and files.
func copyRepo(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	if err := os.CopyFS(dst, os.DirFS(repo)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func TestLoad_rejectsSymlinksLeavingTheRepo(t *testing.T) {
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "values.yaml"), []byte("a: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Run("a values file symlinked outside", func(t *testing.T) {
		root := copyRepo(t)
		p := filepath.Join(root, "services/checkout/values-prod.yaml")
		os.Remove(p)
		if err := os.Symlink(filepath.Join(outside, "values.yaml"), p); err != nil {
			t.Fatal(err)
		}
		_, err := Load(root, "services/checkout")
		var me *Error
		if !errors.As(err, &me) || !strings.Contains(err.Error(), "leaves the repository") || me.Problems[0].Line != 17 {
			t.Fatalf("want a confinement error on line 17, got %v", err)
		}
		if strings.Contains(err.Error(), outside) {
			t.Errorf("error reveals the absolute target: %v", err)
		}
	})
	t.Run("a service folder symlinked outside", func(t *testing.T) {
		root := copyRepo(t)
		if err := os.Symlink(outside, filepath.Join(root, "services/evil")); err != nil {
			t.Fatal(err)
		}
		if _, err := Load(root, "services/evil"); !errors.Is(err, ErrOutsideRepo) {
			t.Fatalf("want ErrOutsideRepo, got %v", err)
		}
	})
	t.Run("a symlink inside the service folder", func(t *testing.T) {
		root := copyRepo(t)
		if err := os.Symlink(outside, filepath.Join(root, "services/checkout/leak")); err != nil {
			t.Fatal(err)
		}
		svc, err := Load(root, "services/checkout")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := svc.Inputs(root); !errors.Is(err, ErrOutsideRepo) {
			t.Fatalf("Inputs: want ErrOutsideRepo, got %v", err)
		}
	})
	t.Run("a symlink to another folder of the repo becomes an input", func(t *testing.T) {
		root := copyRepo(t)
		if err := os.MkdirAll(filepath.Join(root, "shared/config"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../shared/config", filepath.Join(root, "services/checkout/config")); err != nil {
			t.Fatal(err)
		}
		svc, err := Load(root, "services/checkout")
		if err != nil {
			t.Fatal(err)
		}
		got, err := svc.Inputs(root)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"charts/service", "modules/network", "services/checkout", "shared/config"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Inputs = %v, want %v", got, want)
		}
	})
	t.Run("a terraform module outside the repo", func(t *testing.T) {
		root := copyRepo(t)
		tf := filepath.Join(root, "services/checkout/terraform/main.tf")
		data, _ := os.ReadFile(tf)
		data = []byte(strings.Replace(string(data), "../../../modules/network", "../../../../elsewhere", 1))
		if err := os.WriteFile(tf, data, 0o644); err != nil {
			t.Fatal(err)
		}
		svc, err := Load(root, "services/checkout")
		if err != nil {
			t.Fatal(err)
		}
		_, err = svc.Inputs(root)
		if !errors.Is(err, ErrOutsideRepo) || !strings.Contains(err.Error(), "services/checkout/terraform/main.tf:6") {
			t.Fatalf("want ErrOutsideRepo naming main.tf:6, got %v", err)
		}
	})
}

func TestLoad_reportsMissingFilesOnTheirLine(t *testing.T) {
	root := copyRepo(t)
	if err := os.Remove(filepath.Join(root, "services/checkout/values-staging.yaml")); err != nil {
		t.Fatal(err)
	}
	_, err := Load(root, "services/checkout")
	var me *Error
	if !errors.As(err, &me) || me.Problems[0].Line != 11 || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("want a missing-file problem on line 11, got %v", err)
	}
	if _, err := Load(root, "../x"); err == nil {
		t.Error("Load accepted a service folder with ..")
	}
}

func FuzzParse(f *testing.F) {
	seed, err := os.ReadFile(filepath.Join(repo, "services/checkout/service.yaml"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed)
	f.Add([]byte("apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: a\nchart: {repo: oci://r, name: x, version: 1}\nenvironments: [{name: a, namespace: b}]\n"))
	f.Add([]byte("a: &x [*x]\n"))
	f.Add([]byte("environments: [{name: a, approval: {approvers: [1, 2]}}]"))
	f.Add([]byte("--- \n...\n"))
	f.Add([]byte("{"))
	f.Fuzz(func(t *testing.T, data []byte) {
		svc, err := Parse(data, "service.yaml")
		if err != nil {
			var me *Error
			if !errors.As(err, &me) || len(me.Problems) == 0 {
				t.Fatalf("error is not a *manifest.Error with problems: %T %v", err, err)
			}
			return
		}
		// An accepted manifest always satisfies the invariants.
		if !dnsLabel.MatchString(svc.Name) || len(svc.Environments) == 0 {
			t.Fatalf("accepted an invalid manifest: %+v", svc)
		}
		for _, e := range svc.Environments {
			if e.Delivery == "" || e.Approval.AutoApproveRisk == "" {
				t.Fatal("defaults not set")
			}
			vals, err := svc.ValuesFiles(e.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, v := range vals {
				if strings.HasPrefix(v, "/") || strings.HasPrefix(v, "../") || v == ".." {
					t.Fatalf("path escapes: %q", v)
				}
			}
		}
	})
}

func TestParse_approvalRollbackAutoIsRead(t *testing.T) {
	base := string(readSample(t))
	svc, err := Parse([]byte(strings.Replace(base, "autoApproveRisk: low", "autoApproveRisk: low, rollback: auto", 1)), "services/checkout/service.yaml")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := svc.Environments[0].Approval.Rollback; got != RollbackAuto {
		t.Fatalf("staging approval.rollback = %q, want auto", got)
	}
}
