package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The demo's Repository (its own git repository on the test's server) and
// its two releases, in the namespaces `make demo` uses.
const (
	demoRepo    = "demo"
	cartStaging = "cart-staging"
	cartProd    = "cart-prod"
)

// demoTerraform is the stack operator/hack/demo.sh gives cart (the
// built-in terraform_data: no provider download).
const demoTerraform = `variable "env" {
  type = string
}

resource "terraform_data" "orders_queue" {
  input = "cart-${var.env}-orders"
}

output "orders_queue" {
  value = terraform_data.orders_queue.output
}
`

// TestDemoStoryThroughTheCluster is `make demo`'s story (operator/hack/
// demo.sh) through the pods: this repository's services/cart and
// charts/service pushed to a Repository of their own, cart given the
// demo's Terraform stack and the production floor (ApprovalPolicy
// "*-prod"). The first push is held at the gate for both environments;
// `kubectl sluice approve` releases each, the runner pod applies the
// approved Terraform plan file (the state Secret holds the queue) and the
// Helm applier installs the chart, Applied only with its pods Ready. A
// second push scaling staging to 3 replicas is low risk and auto-approved
// to Helm revision 2 with the 3 pods Ready, and prod, which reads nothing
// that changed, gets no change at all.
func TestDemoStoryThroughTheCluster(t *testing.T) {
	c := need(t)
	ctx := context.Background()
	start := time.Now()
	since := metav1.NewTime(start.Add(-time.Second))
	g := c.anotherRepo(t, demoRepo)
	writeDemoCart(t, c.root, g.work)
	head := g.commit(t, "Add cart")

	for _, ns := range []string{cartStaging, cartProd} {
		c.targetNamespace(t, ns)
	}
	for _, o := range []client.Object{
		&sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: demoRepo, Namespace: controlNS},
			Spec: sluicev1.RepositorySpec{
				URL: g.url, Ref: &sluicev1.GitReference{Branch: "main"},
				Interval:           &metav1.Duration{Duration: 3 * time.Second},
				TargetNamespaces:   []string{"cart-*"},
				ServiceAccountName: "infra-deployer",
			}},
		// The production floor follows the namespace, not the
		// environment's name a pusher writes.
		&sluicev1.ApprovalPolicy{ObjectMeta: metav1.ObjectMeta{Name: "prod-floor", Namespace: controlNS},
			Spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{"*-prod"},
				Rule: sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone}}},
	} {
		if err := c.c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
		}
	}

	// Both cart changes are new objects (risk medium): each is held for
	// one approval, and nothing is installed meanwhile.
	changes := map[string]string{}
	for _, rel := range []string{cartStaging, cartProd} {
		cr := c.waitChange(t, sluicev1.ChangeRequestName(rel, head, 1), sluicev1.PhaseAwaitingApproval)
		if cr.Spec.PlanSummary == nil || cr.Spec.PlanSummary.Add != 1 {
			t.Fatalf("%s plans %+v, want the orders queue (one terraform_data) to add", cr.Name, cr.Spec.PlanSummary)
		}
		if _, err := c.cs.AppsV1().Deployments(rel).Get(ctx, rel, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("%s's Deployment exists before its change was approved (err %v)", rel, err)
		}
		changes[rel] = cr.Name
	}
	for _, rel := range []string{cartStaging, cartProd} {
		c.approve(t, changes[rel])
	}
	for rel, want := range map[string]int32{cartStaging: 1, cartProd: 2} {
		c.waitChange(t, changes[rel], sluicev1.PhaseApplied)
		c.waitReady(t, rel, rel, want)
		c.requireHelmRevisions(t, rel, rel, 1)
		c.wantState(t, "tfstate-default-"+rel, `"`+rel+`-orders"`)
	}
	runs, pod, logs := c.runnerRuns(t, since, "cart")
	if runs["plan"] < 2 || runs["apply"] != 2 {
		t.Fatalf("the runner pod ran %v for services/cart (want at least 2 plans and exactly 2 applies, one per environment); its log:\n%s", runs, logs)
	}
	t.Logf("first push: both environments approved, planned and applied (runner pod %s ran %v) in %s", pod, runs, time.Since(start).Round(time.Second))

	// A second push: staging scales to 3 replicas, low risk, auto-approved.
	second := time.Now()
	f := filepath.Join(g.work, "services", "cart", "values-staging.yaml")
	writeFile(t, f, "replicaCount: 3\n")
	head2 := g.commit(t, "cart: 3 replicas in staging")
	cr := c.waitChange(t, sluicev1.ChangeRequestName(cartStaging, head2, 1), sluicev1.PhaseApplied)
	if a := findCondition(cr.Status.Conditions, sluicev1.ConditionApproved); a == nil || a.Reason != sluicev1.ReasonAutoApproved {
		t.Fatalf("%s was not auto-approved:%s", cr.Name, conditions(cr.Status.Conditions))
	}
	c.waitReady(t, cartStaging, cartStaging, 3)
	c.requireHelmRevisions(t, cartStaging, cartStaging, 2)
	if err := c.c.Get(ctx, client.ObjectKey{Namespace: controlNS, Name: sluicev1.ChangeRequestName(cartProd, head2, 1)}, &sluicev1.ChangeRequest{}); !apierrors.IsNotFound(err) {
		t.Fatalf("cart-prod got a change for a push that changes nothing it reads (err %v)", err)
	}
	c.requireHelmRevisions(t, cartProd, cartProd, 1)
	t.Logf("second push auto-approved to Helm revision 2 with 3 pods Ready in %s; whole story %s",
		time.Since(second).Round(time.Second), time.Since(start).Round(time.Second))
}

// writeDemoCart writes what operator/hack/demo.sh pushes of cart into the
// clone at dir: this repository's services/cart and charts/service, cart
// given the demo's Terraform stack (a variable env per environment). The
// one difference: the image is the test app the node has (cart's own
// image is not built here).
func writeDemoCart(t *testing.T, root, dir string) {
	t.Helper()
	for _, d := range []string{"services/cart", "charts/service"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, d)), 0o755); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command("cp", "-r", filepath.Join(root, d), filepath.Join(dir, d)).CombinedOutput(); err != nil {
			t.Fatalf("copying %s: %v\n%s", d, err, out)
		}
	}
	svc := filepath.Join(dir, "services", "cart")
	edit := func(name string, from, to string) {
		t.Helper()
		f := filepath.Join(svc, name)
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), from) {
			t.Fatalf("services/cart/%s no longer has %q: the demo story needs updating", name, from)
		}
		writeFile(t, f, strings.Replace(string(b), from, to, 1))
	}
	// As demo.sh's sed: the stack, and each environment's env variable.
	edit("service.yaml", "\nvalues: [values.yaml]\n", "\nvalues: [values.yaml]\nterraform: {dir: terraform}\n")
	for _, env := range []string{"staging", "prod"} {
		line := "    values: [values-" + env + ".yaml]\n"
		edit("service.yaml", line, line+"    terraform: {vars: {env: "+env+"}}\n")
	}
	edit("values.yaml", "  repository: ghcr.io/sluice-gitops/cart\n  tag: \"2.0.1\"\n",
		"  repository: sluice-gitops/testapp\n  tag: e2e\n  pullPolicy: IfNotPresent\n")
	if err := os.MkdirAll(filepath.Join(svc, "terraform"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(svc, "terraform", "main.tf"), demoTerraform)
}
