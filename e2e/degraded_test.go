package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The service whose image cannot be pulled, its namespace (matched by the
// Repository's "web-*") and its release.
const (
	pullNS  = "web-pullfail"
	pullRel = "pullfail-e2e"
	// An allowed registry (the default policies refuse others), a tag
	// that was never pushed and that the node has not loaded: the pull
	// fails (no such tag, or no network to ask).
	pullImage = "sluice-gitops/testapp:does-not-exist"
)

// TestDegraded_anImageThatCannotBePulledIsOnTheReleaseWithinSeconds: a
// service whose image does not exist is approved and applied by the Helm
// applier (which waits for ready pods, so the change stays Applying); the
// kubelet's pull failure is on the Release as Degraded=ImagePullFailed
// seconds after the pod reports it, long before any progress deadline, and
// `kubectl sluice diagnose` names the image. The release is left as it is
// (its change ends when the applier's wait times out).
func TestDegraded_anImageThatCannotBePulledIsOnTheReleaseWithinSeconds(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	repo := c.serveGit(t)
	c.targetNamespace(t, pullNS)
	writeService(t, repo.work, c.root, "pullfail", pullNS, 1, "0s")
	values := filepath.Join(repo.work, "services", "pullfail", "values.yaml")
	if err := os.WriteFile(values, []byte(`image:
  repository: sluice-gitops/testapp
  tag: does-not-exist
  pullPolicy: IfNotPresent
replicaCount: 1
`), 0o644); err != nil {
		t.Fatal(err)
	}
	head := repo.commit(t, "pullfail: an image that does not exist")
	cr := c.waitChange(t, pullRel+"-"+head[:10], sluicev1.PhaseAwaitingApproval)
	c.approve(t, cr.Name)

	// When the kubelet first says the pull failed.
	var failedAt time.Time
	eventually(t, "a pod of "+pullRel+" failing to pull "+pullImage, func() (bool, error) {
		for _, p := range c.pods(t, pullNS, "app.kubernetes.io/instance="+pullRel) {
			for _, cs := range p.Status.ContainerStatuses {
				if w := cs.State.Waiting; w != nil && (w.Reason == "ErrImagePull" || w.Reason == "ImagePullBackOff") {
					failedAt = time.Now()
					return true, nil
				}
			}
		}
		return false, fmt.Errorf("no pod failing to pull yet")
	})
	var cond *metav1.Condition
	eventually(t, "Release "+pullRel+" Degraded=ImagePullFailed", func() (bool, error) {
		rel := &sluicev1.Release{}
		if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: pullRel}, rel); err != nil {
			return false, err
		}
		cond = meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDegraded)
		return cond != nil && cond.Status == metav1.ConditionTrue && cond.Reason == sluicev1.ReasonImagePullFailed, fmt.Errorf("Degraded is %+v", cond)
	})
	t.Logf("Degraded=ImagePullFailed %.1f s after the pull failure was seen: %s", time.Since(failedAt).Seconds(), cond.Message)
	if !strings.Contains(cond.Message, pullImage) {
		t.Errorf("the condition does not name the image %s: %s", pullImage, cond.Message)
	}

	bin := filepath.Join(c.root, "bin", "kubectl-sluice")
	cctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(cctx, bin, "--kubeconfig", c.kubeconfig, "-n", controlNS, "diagnose", pullRel).CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl sluice diagnose %s: %v\n%s", pullRel, err, out)
	}
	t.Logf("kubectl sluice diagnose %s:\n%s", pullRel, out)
	first, _, _ := strings.Cut(string(out), "Steps:")
	if !strings.Contains(first, "First failing step: workload") || !strings.Contains(first, pullImage) {
		t.Errorf("diagnose does not put the workload step first naming %s:\n%s", pullImage, out)
	}
}

// targetNamespace creates ns and lets the Repository's deployer act in
// it, as setupControlNamespace does for the other services.
func (c *cluster) targetNamespace(t *testing.T, ns string) {
	t.Helper()
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "infra-deployer", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "e2e-deployer"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "infra-deployer", Namespace: controlNS}}},
	} {
		if err := c.c.Create(context.Background(), o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}
