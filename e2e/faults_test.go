package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/release"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The fault tests' service and its namespace.
const (
	faultNS  = "api-e2e"
	faultRel = "api-e2e"
)

// operatorLease is the operator's leader election Lease in its namespace.
const operatorLease = "sluice-operator.gitops.sluice.dev"

// TestFaults: with two operator replicas, each fault hits a change in
// flight and the change still ends Applied exactly once: one new deployed
// Helm revision per change, no change lost.
//   - the leader's pod deleted while it applies;
//   - the syncer's pod deleted right after the push it must sync;
//   - the API server stopped and started while the operator applies.
func TestFaults(t *testing.T) {
	c := need(t)
	repo := c.serveGit(t)
	svcDir := filepath.Join(repo.work, "services", "api")

	t.Run("leader deleted mid-apply", func(t *testing.T) {
		writeService(t, repo.work, c.root, "api", faultNS, 1, "15s")
		cr := c.pushAndApprove(t, repo, "api: first release")
		c.waitPhase(t, cr, sluicev1.PhaseApplying)
		leader := c.operatorLeader(t)
		t.Logf("deleting the leader %s while %s applies", leader, cr)
		if err := c.cs.CoreV1().Pods(sluiceNS).Delete(context.Background(), leader, metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
			t.Fatal(err)
		}
		c.waitChange(t, cr, sluicev1.PhaseApplied)
		c.requireRevisions(t, 1)
		eventually(t, "a new leader", func() (bool, error) { l := c.operatorLeaderOrEmpty(); return l != "" && l != leader, nil })
	})

	t.Run("syncer deleted mid-sync", func(t *testing.T) {
		setReplicas(t, svcDir, 2)
		head := repo.commit(t, "api: two replicas")
		syncer := c.readyPod(t, sluiceNS, componentSelector("syncer"))
		if err := c.cs.CoreV1().Pods(sluiceNS).Delete(context.Background(), syncer.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)}); err != nil {
			t.Fatal(err)
		}
		cr := faultRel + "-" + head[:10]
		c.waitChange(t, cr, sluicev1.PhaseAwaitingApproval)
		c.approve(t, cr)
		c.waitChange(t, cr, sluicev1.PhaseApplied)
		if n := c.changesFor(t, head[:10]); n != 1 {
			t.Fatalf("%d ChangeRequests for commit %s, want 1", n, head[:10])
		}
		c.requireRevisions(t, 2)
	})

	t.Run("API server restarted mid-apply", func(t *testing.T) {
		setReplicas(t, svcDir, 1)
		cr := c.pushAndApprove(t, repo, "api: back to one replica")
		c.waitPhase(t, cr, sluicev1.PhaseApplying)
		script := filepath.Join(c.root, "hack", "realnode", "apiserver.sh")
		for _, verb := range []string{"stop", "start"} {
			if out, err := exec.Command(script, verb).CombinedOutput(); err != nil {
				t.Fatalf("apiserver.sh %s: %v\n%s", verb, err, out)
			}
		}
		t.Log("API server restarted")
		eventually(t, "the API server back", func() (bool, error) {
			_, err := c.cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(context.Background())
			return err == nil, err
		})
		c.waitChange(t, cr, sluicev1.PhaseApplied)
		c.requireRevisions(t, 3)
	})
}

// pushAndApprove commits and pushes what the clone holds, waits for the
// fault service's change of that commit and approves it.
func (c *cluster) pushAndApprove(t *testing.T, repo *gitServer, message string) string {
	t.Helper()
	head := repo.commit(t, message)
	cr := faultRel + "-" + head[:10]
	c.waitChange(t, cr, sluicev1.PhaseAwaitingApproval)
	c.approve(t, cr)
	return cr
}

// waitPhase waits until the change is in phase or Applied, so a fast
// apply does not leave the test waiting for a phase it passed; any other
// end (Failed, Rejected, Superseded) fails the test at once.
func (c *cluster) waitPhase(t *testing.T, name string, phase sluicev1.ChangeRequestPhase) {
	t.Helper()
	if got := c.waitChangeIn(t, name, phase, sluicev1.PhaseApplied); got.Status.Phase == sluicev1.PhaseApplied {
		t.Logf("%s was already Applied: the fault hits after the apply", name)
	}
}

// operatorLeader is the pod holding the operator's leader Lease.
func (c *cluster) operatorLeader(t *testing.T) string {
	t.Helper()
	var l string
	eventually(t, "an operator leader", func() (bool, error) { l = c.operatorLeaderOrEmpty(); return l != "", nil })
	return l
}

func (c *cluster) operatorLeaderOrEmpty() string {
	lease := &coordinationv1.Lease{}
	if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: sluiceNS, Name: operatorLease}, lease); err != nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	// controller-runtime's identity is <pod name>_<uuid>.
	pod, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return pod
}

// requireRevisions checks the fault release's Helm history: want
// revisions in all, the last one deployed, none failed or pending (an
// apply done twice or cut off would show).
func (c *cluster) requireRevisions(t *testing.T, want int) {
	t.Helper()
	c.requireHelmRevisions(t, faultNS, faultRel, want)
}

// requireHelmRevisions checks Helm release rel's history in ns: want
// revisions in all, the last one deployed.
func (c *cluster) requireHelmRevisions(t *testing.T, ns, rel string, want int) {
	t.Helper()
	cfg, err := c.helmConfig(ns)
	if err != nil {
		t.Fatal(err)
	}
	h, err := action.NewHistory(cfg).Run(rel)
	if err != nil {
		t.Fatalf("helm history %s: %v", rel, err)
	}
	var states []string
	for _, r := range h {
		states = append(states, fmt.Sprintf("%d:%s", r.Version, r.Info.Status))
	}
	t.Logf("helm history of %s: %v", rel, states)
	if len(h) != want {
		t.Fatalf("%d Helm revisions of %s, want %d: %v", len(h), rel, want, states)
	}
	last := h[len(h)-1]
	if last.Info.Status != release.StatusDeployed {
		t.Fatalf("the last revision of %s is %s", rel, last.Info.Status)
	}
}

// changesFor counts the ChangeRequests of the fault release for a commit.
func (c *cluster) changesFor(t *testing.T, short string) int {
	t.Helper()
	l := &sluicev1.ChangeRequestList{}
	if err := c.c.List(context.Background(), l, client.InNamespace(controlNS), client.MatchingLabels{sluicev1.LabelRelease: faultRel}); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, cr := range l.Items {
		if strings.Contains(cr.Name, short) {
			n++
		}
	}
	return n
}

// setReplicas rewrites replicaCount in the service's values.yaml.
func setReplicas(t *testing.T, svcDir string, n int) {
	t.Helper()
	f := filepath.Join(svcDir, "values.yaml")
	b, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "replicaCount:") {
			l = fmt.Sprintf("replicaCount: %d", n)
		}
		out = append(out, l)
	}
	if err := os.WriteFile(f, []byte(strings.Join(out, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
}
