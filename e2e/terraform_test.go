package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The Terraform test's service: its release and target namespace (one of
// the Repository's "web-*" targets).
const (
	tfNS  = "web-tf"
	tfRel = "tf-e2e"
)

// TestTerraformPlansAndAppliesInTheRunnerPod: a service with a Terraform
// stack (the built-in terraform_data, no provider download) is planned by
// the syncer and, once approved with `kubectl sluice approve`, applied by
// the operator, both through the runner workload pod (the only image with
// terraform in it; its log names each run); the change is Applied, the
// release's state Secret in the control namespace holds the applied input,
// and a second commit changing a variable is planned as one change and
// applied the same way.
func TestTerraformPlansAndAppliesInTheRunnerPod(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	repo := c.serveGit(t)
	start := time.Now()
	since := metav1.NewTime(start.Add(-time.Second))

	writeService(t, repo.work, c.root, "tf", tfNS, 1, "0s")
	writeTerraform(t, repo.work, "tf", tfNS, "small")
	head := repo.commit(t, "tf: a service with a Terraform stack")

	cr := c.waitChange(t, sluicev1.ChangeRequestName(tfRel, head, 1), sluicev1.PhaseAwaitingApproval)
	if cr.Spec.PlanSummary == nil || cr.Spec.PlanSummary.Add != 1 {
		t.Fatalf("%s plans %+v, want one terraform_data to add", cr.Name, cr.Spec.PlanSummary)
	}
	state := "tfstate-default-" + tfRel
	if _, err := c.cs.CoreV1().Secrets(controlNS).Get(ctx, state, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the state Secret %s exists before the change was approved (err %v)", state, err)
	}
	c.approve(t, cr.Name)
	c.waitChange(t, cr.Name, sluicev1.PhaseApplied)
	c.wantState(t, state, `"size":"small"`)
	t.Logf("%s planned and applied in %s", cr.Name, time.Since(start).Round(time.Second))

	// A change of a variable: one resource to change, applied the same way.
	writeTerraform(t, repo.work, "tf", tfNS, "large")
	head = repo.commit(t, "tf: a larger size")
	next := c.waitChange(t, sluicev1.ChangeRequestName(tfRel, head, 1), sluicev1.PhaseAwaitingApproval)
	if s := next.Spec.PlanSummary; s == nil || s.Add+s.Change+s.Destroy == 0 || s.Change+s.Add > 1 {
		t.Fatalf("%s plans %+v, want the one terraform_data changed (or replaced)", next.Name, s)
	}
	c.approve(t, next.Name)
	c.waitChange(t, next.Name, sluicev1.PhaseApplied)
	c.wantState(t, state, `"size":"large"`)

	// Both plans and both applies ran in the runner pod.
	runs, pod, logs := c.runnerRuns(t, since, "tf")
	if runs["plan"] < 2 || runs["apply"] != 2 {
		t.Fatalf("the runner pod ran %v for services/tf (want at least 2 plans and exactly 2 applies); its log:\n%s", runs, logs)
	}
	t.Logf("runner pod %s ran %v; whole test %s", pod, runs, time.Since(start).Round(time.Second))
}

// runnerRuns counts the Terraform runs ("plan", "apply") the runner pod
// logged since then for services/<svc>'s stack, failing the test on a run
// that failed; it returns the counts, the pod's name and its log.
func (c *cluster) runnerRuns(t *testing.T, since metav1.Time, svc string) (map[string]int, string, []byte) {
	t.Helper()
	pod := c.readyPod(t, sluiceNS, componentSelector("runner"))
	logs, err := c.cs.CoreV1().Pods(sluiceNS).GetLogs(pod.Name, &corev1.PodLogOptions{SinceTime: &since}).DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string]int{}
	for _, l := range strings.Split(string(logs), "\n") {
		if !strings.Contains(l, `"msg"="Ran a job"`) || !strings.Contains(l, svc+`/terraform"`) {
			continue
		}
		if !strings.Contains(l, `"failed"=""`) {
			t.Errorf("a run failed in the runner: %s", l)
		}
		for _, op := range []string{"plan", "apply"} {
			if strings.Contains(l, `"op"="`+op+`"`) {
				runs[op]++
			}
		}
	}
	return runs, pod.Name, logs
}

// writeTerraform adds a Terraform stack (one terraform_data of the size
// variable) to services/<name>, which writeService wrote.
func writeTerraform(t *testing.T, dir, name, ns, size string) {
	t.Helper()
	svc := filepath.Join(dir, "services", name)
	files := map[string]string{
		filepath.Join(svc, "service.yaml"): `apiVersion: sluice.dev/v1alpha1
kind: Service
name: ` + name + `
owners: [team-e2e]
chart: {path: charts/service}
values: [values.yaml]
terraform: {dir: terraform}
environments:
  - name: e2e
    namespace: ` + ns + `
    delivery: helm
    terraform: {vars: {size: ` + size + `}}
    approval: {required: 1, autoApproveRisk: none}
`,
		filepath.Join(svc, "terraform", "main.tf"): `terraform {
  required_version = ">= 1.5.0"
}

variable "size" {
  type = string
}

resource "terraform_data" "db" {
  input = {
    size = var.size
  }
}

output "size" {
  value = terraform_data.db.output.size
}
`,
	}
	for f, body := range files {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// wantState checks that the state Secret name in the control namespace
// (Terraform's kubernetes backend: gzipped JSON) holds the text want.
func (c *cluster) wantState(t *testing.T, name, want string) {
	t.Helper()
	s, err := c.cs.CoreV1().Secrets(controlNS).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the state Secret after the apply: %v", err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(s.Data["tfstate"]))
	if err != nil {
		t.Fatalf("state Secret %s: %v", name, err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("state Secret %s: %v", name, err)
	}
	var st struct {
		Resources []struct {
			Type      string            `json:"type"`
			Instances []json.RawMessage `json:"instances"`
		} `json:"resources"`
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatalf("state Secret %s: %v", name, err)
	}
	for _, r := range st.Resources {
		if r.Type == "terraform_data" && len(r.Instances) == 1 {
			compact := &bytes.Buffer{}
			if err := json.Compact(compact, r.Instances[0]); err != nil {
				t.Fatal(err)
			}
			if strings.Contains(compact.String(), want) {
				return
			}
			t.Fatalf("state Secret %s: terraform_data is %s, want %s in it", name, compact, want)
		}
	}
	t.Fatalf("state Secret %s has no terraform_data: %s", name, raw)
}
