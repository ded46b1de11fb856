package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// TestRunnerContainerIsConfinedByLandlock: inside its container the runner
// says at start that runs are confined by Landlock, and a stack that reads
// a file outside the run's allowlist with terraform's file() — the runner's
// own PID 1 environment, which holds its bearer token — is refused by the
// kernel, and no part of the token comes back.
func TestRunnerContainerIsConfinedByLandlock(t *testing.T) {
	c := need(t)
	// Bounded: a runner that never answers fails the test, not the run.
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	pod := c.readyPod(t, sluiceNS, componentSelector("runner"))
	logs, err := c.cs.CoreV1().Pods(sluiceNS).GetLogs(pod.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatal(err)
	}
	line := ""
	for _, l := range strings.Split(string(logs), "\n") {
		if strings.Contains(l, "Terraform runs are confined") || strings.Contains(l, "NOT confined") {
			line = l
		}
	}
	t.Logf("runner: %s", line)
	if !strings.Contains(line, "Terraform runs are confined") || !strings.Contains(line, "Landlock") {
		t.Fatalf("the runner does not report Landlock confinement; its log:\n%s", logs)
	}

	sec, err := c.cs.CoreV1().Secrets(sluiceNS).Get(ctx, releaseName+"-tokens", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := string(sec.Data["runner-token"])
	if token == "" {
		t.Fatalf("secret %s-tokens has no runner-token", releaseName)
	}
	// The node reaches pods directly (NetworkPolicies do not fence the node).
	remote, err := runner.NewRemote(fmt.Sprintf("http://%s:%d", pod.Status.PodIP, runnerPort), token)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "stack")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// tonumber() of the file's text fails and would quote it in its error.
	mainTF := "locals {\n  t = tonumber(file(\"/proc/1/environ\"))\n}\noutput \"t\" {\n  value = local.t\n}\n"
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(mainTF), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = terraform.Plan(ctx, terraform.PlanOptions{ExecOptions: terraform.ExecOptions{Runner: remote}, Dir: dir})
	if err == nil {
		t.Fatal("a plan reading /proc/1/environ succeeded")
	}
	var runErr *terraform.RunError
	if !errorsAs(err, &runErr) {
		t.Fatalf("want a terraform run error, got %v", err)
	}
	details := fmt.Sprint(runErr.Details)
	t.Logf("refused: %s", details)
	if !strings.Contains(details, "denied") {
		t.Errorf("the read was not refused by the kernel: %s", details)
	}
	for _, s := range []string{err.Error(), runErr.Stderr, details, fmt.Sprint(runErr.Diagnostics)} {
		if strings.Contains(s, token) || strings.Contains(s, token[:12]) {
			t.Fatalf("the runner's token came back from the run")
		}
	}
}
