package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"encoding/json"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The verification test's service, its namespace (matched by the
// Repository's "web-*") and the port of the Prometheus it runs on the
// node (the chart's operator egress opens it).
const (
	verifyNS  = "web-verify"
	verifyRel = "verify-e2e"
	promPort  = 19090
)

// TestVerification_aBadVersionOnLiveMetricsIsRolledBack: the release's
// checks query a real Prometheus on the node that discovers the release's
// pods and scrapes them. A good version (error ratio 0) is approved,
// applied by the Helm applier with its pods Ready, and Verified on its
// pods' metrics; a bad version (5%) is applied, fails its check on its own
// pods' metrics, and the operator asks for a rollback, which the syncer in
// its pod builds from the verified revision and the gate lets through by
// the rule's `rollback: auto`; the rollback's pods are the good version's
// again and it is Verified. Nothing here is a stand-in: pods, the
// operator's query and Prometheus' scrape go over the node's network.
func TestVerification_aBadVersionOnLiveMetricsIsRolledBack(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	c.targetNamespace(t, verifyNS)
	c.startPrometheus(t, verifyNS)
	repo := c.serveGit(t)

	promURL := fmt.Sprintf("http://%s:%d", c.nodeIP(t), promPort)
	writeService(t, repo.work, c.root, "verify", verifyNS, 1, "0s")
	writeVerifiedService(t, repo.work, promURL, "0")
	good := repo.commit(t, "verify: a good version")
	goodCR := c.waitChange(t, verifyRel+"-"+good[:10], sluicev1.PhaseAwaitingApproval)
	c.approve(t, goodCR.Name)
	got := c.waitChangeIn(t, goodCR.Name, sluicev1.PhaseVerified)
	t.Logf("%s Verified: %s", got.Name, measurements(got))

	writeVerifiedService(t, repo.work, promURL, "0.05")
	bad := repo.commit(t, "verify: a version with 5% errors")
	badCR := c.waitChange(t, verifyRel+"-"+bad[:10], sluicev1.PhaseAwaitingApproval)
	c.approve(t, badCR.Name)
	got = c.waitChangeIn(t, badCR.Name, sluicev1.PhaseVerificationFailed)
	t.Logf("%s VerificationFailed: %s", got.Name, measurements(got))
	if n := len(got.Status.Verification.Measurements); n == 0 || got.Status.Verification.Measurements[n-1].Value != "0.05" {
		t.Fatalf("the evidence is not the bad pods' ratio: %s", measurements(got))
	}

	rbName := sluicev1.RollbackChangeRequestName(verifyRel, badCR.Name, 1)
	rb := c.waitChangeIn(t, rbName, sluicev1.PhaseVerified)
	if rb.Spec.Rollback == nil || rb.Spec.Rollback.To != goodCR.Name || rb.Spec.Revision != good {
		t.Fatalf("%s is not the rollback of %s to %s at %s: %+v, revision %s", rbName, badCR.Name, goodCR.Name, good[:10], rb.Spec.Rollback, rb.Spec.Revision)
	}
	if c := findCondition(rb.Status.Conditions, sluicev1.ConditionApproved); c == nil || c.Reason != sluicev1.ReasonRollbackAuto {
		t.Fatalf("the rollback passed the gate otherwise than by rollback: auto: %+v", c)
	}
	t.Logf("%s Verified: %s", rb.Name, measurements(rb))
	cm, err := c.cs.CoreV1().ConfigMaps(verifyNS).Get(ctx, verifyRel, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the release's ConfigMap: %v", err)
	}
	if r := cm.Data["TESTAPP_ERROR_RATE"]; r != "0" {
		t.Fatalf("the release runs with error rate %q after the rollback", r)
	}
	rel := &sluicev1.Release{}
	if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: verifyRel}, rel); err != nil {
		t.Fatal(err)
	}
	if rel.Status.LastVerified == nil || rel.Status.LastVerified.ChangeRequest != rbName || len(rel.Status.Quarantine) == 0 || rel.Status.Quarantine[0].ChangeRequest != badCR.Name {
		t.Fatalf("Release: lastVerified %+v, quarantine %+v", rel.Status.LastVerified, rel.Status.Quarantine)
	}
}

// writeVerifiedService makes services/verify's environment verify an
// error ratio under 0.5% on promURL (three measurements 5 s apart, one
// forgiven: the first may still see pods of the previous version) with
// rollback: auto, and its pods run with errorRate.
func writeVerifiedService(t *testing.T, dir, promURL, errorRate string) {
	t.Helper()
	svc := filepath.Join(dir, "services", "verify")
	files := map[string]string{
		"service.yaml": `apiVersion: sluice.dev/v1alpha1
kind: Service
name: verify
owners: [team-e2e]
chart: {path: charts/service}
values: [values.yaml]
environments:
  - name: e2e
    namespace: ` + verifyNS + `
    delivery: helm
    approval: {required: 1, autoApproveRisk: none, rollback: auto}
    verification:
      prometheusURL: ` + promURL + `
      checks:
        - name: error-ratio
          query: max(app_error_ratio{namespace="{{ .Namespace }}"})
          successCondition: result < 0.005
          interval: 5s
          count: 3
          failureLimit: 1
`,
		"values.yaml": `image:
  repository: sluice-gitops/testapp
  tag: e2e
  pullPolicy: IfNotPresent
replicaCount: 1
config:
  TESTAPP_READY_AFTER: 0s
  TESTAPP_ERROR_RATE: "` + errorRate + `"
`,
	}
	for f, body := range files {
		if err := os.WriteFile(filepath.Join(svc, f), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startPrometheus runs Debian's prometheus on the node, on promPort of
// every address (the operator's pods query it at the node's IP). Debian's
// build has no Kubernetes discovery, so the test discovers: it keeps a
// file_sd file of ns's running pods (port 8080, labelled with namespace
// and pod) from a watch of the API server. It stops with the test.
func (c *cluster) startPrometheus(t *testing.T, ns string) {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("the verification test needs prometheus (make prometheus): %v", err)
	}
	dir := t.TempDir()
	targets := filepath.Join(dir, "targets.json")
	if err := os.WriteFile(targets, []byte("[]"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
scrape_configs:
  - job_name: pods
    file_sd_configs:
      - files: [%q]
        refresh_interval: 1s
`, targets)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	discovered := make(chan struct{})
	go func() {
		defer close(discovered)
		c.discoverPods(ctx, t, ns, targets)
	}()
	t.Cleanup(func() {
		cancel()
		<-discovered
	})
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=0.0.0.0:"+strconv.Itoa(promPort), "--log.level=warn")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// exited is closed once the process ended (waitErr is its error).
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() {
			out, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Logf("prometheus log:\n%s", out)
		}
	})
	eventually(t, "Prometheus ready on the node", func() (bool, error) {
		select {
		case <-exited:
			out, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Fatalf("prometheus exited: %v: %s", waitErr, out)
		default:
		}
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", promPort), time.Second)
		if err != nil {
			return false, err
		}
		_ = conn.Close()
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/-/ready", promPort))
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("ready: %s", resp.Status)
	})
}

// discoverPods writes ns's running pods with an IP to file as Prometheus
// file_sd targets whenever a watch of them reports a change, until ctx
// ends (a watch that ends is started again).
func (c *cluster) discoverPods(ctx context.Context, t *testing.T, ns, file string) {
	type group struct {
		Targets []string          `json:"targets"`
		Labels  map[string]string `json:"labels"`
	}
	for ctx.Err() == nil {
		w, err := c.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		if err != nil {
			t.Logf("watching the pods of %s: %v", ns, err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		for range w.ResultChan() {
			pods, err := c.cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				continue
			}
			groups := []group{}
			for _, p := range pods.Items {
				if p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "" && p.DeletionTimestamp == nil {
					groups = append(groups, group{Targets: []string{p.Status.PodIP + ":8080"}, Labels: map[string]string{"namespace": ns, "pod": p.Name}})
				}
			}
			b, _ := json.Marshal(groups)
			tmp := file + ".tmp"
			if os.WriteFile(tmp, b, 0o600) == nil {
				_ = os.Rename(tmp, file)
			}
		}
		w.Stop()
	}
}

// measurements prints a change's verification evidence in one line.
func measurements(cr *sluicev1.ChangeRequest) string {
	if cr.Status.Verification == nil {
		return "no verification status"
	}
	b, _ := json.Marshal(cr.Status.Verification.Measurements)
	return string(b)
}

// findCondition is the condition of type t, or nil.
func findCondition(conds []metav1.Condition, t string) *metav1.Condition {
	for i := range conds {
		if conds[i].Type == t {
			return &conds[i]
		}
	}
	return nil
}
