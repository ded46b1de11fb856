package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The infra repository's control namespace, its one service and the
// namespace that service deploys to.
const (
	controlNS = "infra"
	webNS     = "web-e2e"
	webRel    = "web-e2e"
)

// TestHelmApplierInstallsPodsThatRunThenDeletesThem: a push of a service
// using the golden-path chart with the test app image becomes a
// ChangeRequest; approved with `kubectl sluice approve` it is installed by
// the operator's Helm applier and is Applied only once its pods are Ready
// (the app answers its readiness probe late on purpose); removing the
// service in git proposes a Delete that removes nothing until it is
// approved, and then removes the pods.
func TestHelmApplierInstallsPodsThatRunThenDeletesThem(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	repo := c.serveGit(t)
	writeService(t, repo.work, c.root, "web", webNS, 2, "10s")
	head := repo.commit(t, "web: the e2e service")

	cr := c.waitChange(t, webRel+"-"+head[:10], sluicev1.PhaseAwaitingApproval)
	if _, err := c.cs.AppsV1().Deployments(webNS).Get(ctx, webRel, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the Deployment exists before the change was approved (err %v)", err)
	}
	c.approve(t, cr.Name)

	sawUnready := false
	eventually(t, cr.Name+" Applied", func() (bool, error) {
		got := &sluicev1.ChangeRequest{}
		if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: cr.Name}, got); err != nil {
			return false, err
		}
		d, derr := c.cs.AppsV1().Deployments(webNS).Get(ctx, webRel, metav1.GetOptions{})
		if got.Status.Phase == sluicev1.PhaseApplied {
			if derr != nil {
				t.Fatalf("%s is Applied but its Deployment is not there: %v", cr.Name, derr)
			}
			if d.Status.ReadyReplicas != *d.Spec.Replicas {
				t.Fatalf("%s is Applied with %d of %d pods Ready", cr.Name, d.Status.ReadyReplicas, *d.Spec.Replicas)
			}
			return true, nil
		}
		if got.Status.Phase == sluicev1.PhaseFailed {
			t.Fatalf("%s failed: %v", cr.Name, got.Status.Conditions)
		}
		if derr == nil && d.Status.Replicas > 0 && d.Status.ReadyReplicas < *d.Spec.Replicas {
			sawUnready = true
		}
		return false, fmt.Errorf("phase %s", got.Status.Phase)
	})
	if !sawUnready {
		t.Log("the pods were never seen unready before Applied (the poll missed the window)")
	}
	t.Logf("%s Applied with every pod Ready (pods seen unready before: %v)", cr.Name, sawUnready)

	// Removing the service from git is a Delete change: nothing goes first.
	if err := os.RemoveAll(filepath.Join(repo.work, "services", "web")); err != nil {
		t.Fatal(err)
	}
	// web was the only service: git keeps no empty folder, and the syncer
	// never prunes on a missing services folder (far likelier a mistake),
	// so the folder stays with a file in it.
	if err := os.WriteFile(filepath.Join(repo.work, "services", "README.md"), []byte("Services of the e2e repository.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	head = repo.commit(t, "web: retire")
	del := c.waitChange(t, webRel+"-del-"+head[:10], sluicev1.PhaseAwaitingApproval)
	if _, err := c.cs.AppsV1().Deployments(webNS).Get(ctx, webRel, metav1.GetOptions{}); err != nil {
		t.Fatalf("the Deployment went before the Delete was approved: %v", err)
	}
	c.approve(t, del.Name)
	c.waitDeleteApplied(t, del.Name, webRel)
	eventually(t, "the web pods gone", func() (bool, error) {
		pods := c.pods(t, webNS, "")
		_, err := c.cs.AppsV1().Deployments(webNS).Get(ctx, webRel, metav1.GetOptions{})
		return len(pods) == 0 && apierrors.IsNotFound(err), fmt.Errorf("%d pods, deployment: %v", len(pods), err)
	})
}

// writeService writes services/<name> (the golden-path chart, the test
// app image, replicas pods Ready readyAfter after they start, one
// environment "e2e" deploying to ns, every change needing one approval)
// and charts/service into the clone at dir.
func writeService(t *testing.T, dir, root, name, ns string, replicas int, readyAfter string) {
	t.Helper()
	svc := filepath.Join(dir, "services", name)
	files := map[string]string{
		filepath.Join(svc, "service.yaml"): `apiVersion: sluice.dev/v1alpha1
kind: Service
name: ` + name + `
owners: [team-e2e]
chart: {path: charts/service}
values: [values.yaml]
environments:
  - name: e2e
    namespace: ` + ns + `
    delivery: helm
    approval: {required: 1, autoApproveRisk: none}
`,
		filepath.Join(svc, "values.yaml"): fmt.Sprintf(`image:
  repository: sluice-gitops/testapp
  tag: e2e
  pullPolicy: IfNotPresent
replicaCount: %d
config:
  TESTAPP_READY_AFTER: %s
`, replicas, readyAfter),
	}
	for f, body := range files {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, "charts"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "charts", "service")); err == nil {
		return
	}
	if out, err := exec.Command("cp", "-r", filepath.Join(root, "charts", "service"), filepath.Join(dir, "charts", "service")).CombinedOutput(); err != nil {
		t.Fatalf("copying charts/service: %v\n%s", err, out)
	}
}

// targetNamespaces are where the tests' services deploy.
var targetNamespaces = []string{webNS, faultNS, tfNS, shopNS, argoNS}

// setupControlNamespace creates the control and target namespaces, the
// deployer ServiceAccount with its rights in the target namespace and the
// Repository watching url.
func (c *cluster) setupControlNamespace(t *testing.T, url string) {
	t.Helper()
	ctx := context.Background()
	objs := []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controlNS}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "infra-deployer", Namespace: controlNS}},
		&rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "e2e-deployer"}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{"", "apps", "policy"}, Resources: []string{"*"}, Verbs: []string{"*"}}}},
		// Terraform applies run as the deployer: it reads the plan Secret
		// and its state (Secrets and lock Leases) in the control namespace.
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "infra-deployer-terraform", Namespace: controlNS}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"*"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"*"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "infra-deployer-terraform", Namespace: controlNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "infra-deployer-terraform"},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "infra-deployer", Namespace: controlNS}}},
		&sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: controlNS},
			Spec: sluicev1.RepositorySpec{
				URL: url, Ref: &sluicev1.GitReference{Branch: "main"},
				Interval:           &metav1.Duration{Duration: 3e9},
				TargetNamespaces:   []string{"web-*", "api-*"},
				ServiceAccountName: "infra-deployer",
				Prune:              true,
			}},
	}
	for _, ns := range targetNamespaces {
		objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
			&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "infra-deployer", Namespace: ns},
				RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "e2e-deployer"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "infra-deployer", Namespace: controlNS}}})
	}
	for _, o := range objs {
		if err := c.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}
}

// waitChange waits for ChangeRequest name in the control namespace to
// reach phase. A terminal phase other than the one waited for (Failed,
// Rejected, Superseded, or Applied when waiting for an earlier phase)
// fails the test at once: the change can no longer get there, so waiting
// on would only hang.
func (c *cluster) waitChange(t *testing.T, name string, phase sluicev1.ChangeRequestPhase) *sluicev1.ChangeRequest {
	t.Helper()
	return c.waitChangeIn(t, name, phase)
}

// waitChangeIn waits until the change is in one of phases, failing the
// test when it ends in any other terminal phase.
func (c *cluster) waitChangeIn(t *testing.T, name string, phases ...sluicev1.ChangeRequestPhase) *sluicev1.ChangeRequest {
	t.Helper()
	got := &sluicev1.ChangeRequest{}
	eventually(t, fmt.Sprintf("ChangeRequest %s/%s %v", controlNS, name, phases), func() (bool, error) {
		if err := c.c.Get(context.Background(), client.ObjectKey{Namespace: controlNS, Name: name}, got); err != nil {
			return false, err
		}
		if slices.Contains(phases, got.Status.Phase) {
			return true, nil
		}
		if got.Status.Phase.IsTerminal() {
			t.Fatalf("%s ended %s while the test waited for %v:%s", name, got.Status.Phase, phases, conditions(got.Status.Conditions))
		}
		return false, fmt.Errorf("phase %q", got.Status.Phase)
	})
	return got
}

// waitDeleteApplied waits until the Delete change name of release is
// Applied. An applied Delete removes the Release, and its ChangeRequests
// go with it, often within the second: a poll may never see the change
// Applied, so a change gone together with its Release counts when the
// change's own Event recorded the phase Applied.
func (c *cluster) waitDeleteApplied(t *testing.T, name, release string) {
	t.Helper()
	ctx := context.Background()
	eventually(t, "Delete change "+name+" Applied (or gone with its Release after Applied)", func() (bool, error) {
		got := &sluicev1.ChangeRequest{}
		err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: name}, got)
		switch {
		case err == nil && got.Status.Phase == sluicev1.PhaseApplied:
			return true, nil
		case err == nil && got.Status.Phase.IsTerminal():
			t.Fatalf("%s ended %s:%s", name, got.Status.Phase, conditions(got.Status.Conditions))
		case err == nil:
			return false, fmt.Errorf("phase %q", got.Status.Phase)
		case !apierrors.IsNotFound(err):
			return false, err
		}
		if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: release}, &sluicev1.Release{}); !apierrors.IsNotFound(err) {
			return false, fmt.Errorf("the change is gone but Release %s is not (%v)", release, err)
		}
		evs, err := c.cs.CoreV1().Events(controlNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if strings.HasPrefix(e.Message, "phase "+string(sluicev1.PhaseApplied)) {
				t.Logf("%s was Applied and went with Release %s: %s", name, release, e.Message)
				return true, nil
			}
		}
		return false, fmt.Errorf("%s and its Release are gone without an Applied Event", name)
	})
}

// approve approves the change as the admin user with kubectl sluice.
func (c *cluster) approve(t *testing.T, name string) {
	t.Helper()
	bin := filepath.Join(c.root, "bin", "kubectl-sluice")
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--kubeconfig", c.kubeconfig, "-n", controlNS, "approve", name, "--comment", "e2e").CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl sluice approve %s: %v\n%s", name, err, out)
	}
	t.Logf("kubectl sluice approve %s: %s", name, strings.TrimSpace(string(out)))
}
