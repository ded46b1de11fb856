package drift

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	tfapplier "github.com/sluice-gitops/sluice/operator/internal/applier/terraform"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// tfStack is a stack of the built-in terraform_data resource (no provider
// download), with one variable.
const tfStack = `variable "size" {
  type = string
}

resource "terraform_data" "db" {
  input = "db-${var.size}"
}
`

// tfFixture is a control namespace with a Repository in drift mode warn
// and a Terraform-only Release whose approved change (size=small) was
// applied to its state through the operator's state server.
type tfFixture struct {
	t       *testing.T
	state   *tfstate.Server
	repo    *sluicev1.Repository
	release *sluicev1.Release
	applied *sluicev1.ChangeRequest
	files   map[string][]byte
	applier *tfapplier.Applier
	rec     *Reconciler
}

func newTFFixture(t *testing.T) *tfFixture {
	t.Helper()
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatalf("this test needs terraform on PATH: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	state := tfstatetest.New(t, env.Config, tfstate.Options{})

	ctl := fmt.Sprintf("tf-drift-%d-%d", os.Getpid(), time.Now().UnixNano()%1e6)
	c := env.Client
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ctl}}))
	f := &tfFixture{t: t, state: state}
	f.repo = &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ctl},
		Spec: sluicev1.RepositorySpec{URL: "https://git.example.com/infra.git", ServiceAccountName: "deployer", TargetNamespaces: []string{"db-*"},
			Drift: &sluicev1.DriftPolicy{Mode: sluicev1.DriftWarn, Interval: &metav1.Duration{Duration: 10 * time.Minute}}},
	}
	require.NoError(t, c.Create(ctx, f.repo))
	f.release = &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "db-staging", Namespace: ctl},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "db", Environment: "staging", SourcePath: "services/db",
			TargetNamespace: "db-staging", Delivery: sluicev1.DeliveryHelm, Chart: sluicev1.ChartSource{Path: "charts/db"},
			Terraform: &sluicev1.TerraformSource{Dir: "services/db/terraform", Vars: map[string]string{"size": "small"}},
			Rule:      sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
	}
	require.NoError(t, c.Create(ctx, f.release))
	f.files = map[string][]byte{"services/db/service.yaml": []byte("name: db\n"), "services/db/terraform/main.tf": []byte(tfStack)}
	// The Repository's ServiceAccount reads the plan Secrets.
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: ctl}}))
	require.NoError(t, env.GrantRole(ctx, ctl, "plans", types.NamespacedName{Namespace: ctl, Name: "deployer"},
		[]rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}}},
		authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets"}))

	// The approved change's plan, made as the syncer makes it.
	plan := f.plan("small", false)
	tb := artifacttest.Tarball(f.files)
	gz := artifacttest.Gzip(tb)
	commit := appliertest.RandomSHA()
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, commit, 1), Namespace: ctl,
			Labels: map[string]string{sluicev1.LabelRelease: f.release.Name}},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: commit, Attempt: 1, TargetNamespace: "db-staging", Delivery: sluicev1.DeliveryHelm,
			Source:         appliertest.SourceOf(f.release.Spec),
			Artifact:       sluicev1.ArtifactReference{URL: server.Put(ctl+"/"+commit+".tar.gz", gz), SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			PlanDigest:     sluicev1.Digest(plan.Report.PlanDigest),
			PlanFileSHA256: sluicev1.Digest(plan.Report.PlanFileSHA256),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			Rule:           sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
			// As the syncer records it (policy.BundleDigest).
			PolicyBundleDigest: sluicev1.SHA256Digest([]byte("the syncer's policy bundle")),
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	require.NoError(t, c.Create(ctx, cr))
	f.applied = cr
	// The plan Secret, as the syncer stores it, and alice's approval.
	require.NoError(t, c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.PlanSecretName(cr.Name, 0), Namespace: ctl},
		Type:       corev1.SecretTypeOpaque,
		Data:       map[string][]byte{sluicev1.PlanSecretKey: plan.PlanFile},
	}))
	require.NoError(t, c.Create(ctx, &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: cr.Name + "-", Namespace: ctl},
		Spec: sluicev1.ApprovalSpec{Release: f.release.Name, ChangeRequest: cr.Name, ApprovalDigest: cr.Spec.ApprovalDigest, Decision: sluicev1.DecisionApprove,
			Approver: "k8s:alice", Source: sluicev1.SourceKubernetes},
	}))
	fetcher, err := artifact.NewFetcher(server.BaseURL())
	require.NoError(t, err)
	fetcher.TempDir = t.TempDir()
	a, err := tfapplier.New(tfapplier.Options{Config: env.Config, Fetcher: fetcher, Runner: &runner.Local{}, State: state, Log: logr.Discard()})
	require.NoError(t, err)

	// Applied by the Terraform applier, its result recorded as the
	// ChangeRequest controller records it.
	res, err := a.Apply(ctx, applier.Request{Change: cr.DeepCopy(), Release: applier.ReleaseOf(f.get()), Repository: f.repo})
	require.NoError(t, err)
	require.NotNil(t, res.Terraform, res.Message)
	orig := cr.DeepCopy()
	now := metav1.Now()
	cr.Status.Apply = &sluicev1.ApplyResult{Applier: tfapplier.Name, Message: res.Message, Terraform: res.Terraform, StartedAt: &now, FinishedAt: &now}
	require.NoError(t, c.Status().Patch(ctx, cr, client.MergeFrom(orig)))
	f.applied = cr
	rel := f.get()
	origRel := rel.DeepCopy()
	rel.Status.AppliedChange, rel.Status.LastSyncedCommit = cr.Name, commit
	rel.Status.AppliedDigest, rel.Status.AppliedRevision = cr.Spec.ApprovalDigest, commit
	require.NoError(t, c.Status().Patch(ctx, rel, client.MergeFrom(origRel)))

	f.applier = a
	f.rec = &Reconciler{Client: c, Terraform: &TerraformChecker{Planner: a}, Metrics: metrics.NewDrift()}
	return f
}

// run plans the stack with size and applies that plan to the release's
// state through the state server with an apply credential: a second
// terraform run behind Sluice's back (someone with console access to the
// state).
func (f *tfFixture) run(size string) *tf.PlanResult {
	f.t.Helper()
	return f.apply(f.plan(size, false))
}

// destroy destroys the stack's resources in the release's state with a
// second terraform run.
func (f *tfFixture) destroy() {
	f.t.Helper()
	f.apply(f.plan("small", true))
}

// plan plans the stack with size (or its destroy) against the release's
// state, as the syncer does.
func (f *tfFixture) plan(size string, destroy bool) *tf.PlanResult {
	f.t.Helper()
	dir, stack, ex := f.stack()
	res, err := tf.Plan(context.Background(), tf.PlanOptions{ExecOptions: ex, Root: dir, Dir: stack, Vars: map[string]string{"size": size}, Backend: tf.BackendHTTP, Destroy: destroy})
	require.NoError(f.t, err)
	return res
}

// apply applies a plan of f.plan.
func (f *tfFixture) apply(res *tf.PlanResult) *tf.PlanResult {
	f.t.Helper()
	dir, stack, ex := f.stack()
	_, err := tf.Apply(context.Background(), tf.ApplyOptions{ExecOptions: ex, Root: dir, Dir: stack, PlanFile: res.PlanFile,
		PlanFileSHA256: res.Report.PlanFileSHA256, Backend: tf.BackendHTTP})
	require.NoError(f.t, err)
	return res
}

// stack writes the fixture's files into a new folder and returns it, the
// stack folder and exec options with an apply credential for the state.
func (f *tfFixture) stack() (string, string, tf.ExecOptions) {
	f.t.Helper()
	dir := f.t.TempDir()
	for n, b := range f.files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.t, os.WriteFile(p, b, 0o644))
	}
	stack := filepath.Join(dir, "services/db/terraform")
	cred := tfstatetest.Grant(f.t, f.state, tfstate.Grant{Namespace: f.release.Namespace, Release: f.release.Name, Mode: tfstate.ModeApply, TTL: time.Hour})
	return dir, stack, tf.ExecOptions{Runner: &runner.Local{}, Env: cred.Env()}
}

func (f *tfFixture) get() *sluicev1.Release {
	f.t.Helper()
	rel := &sluicev1.Release{}
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), rel))
	return rel
}

// check runs one drift pass of the release and returns its Drifted
// condition.
func (f *tfFixture) check() (*sluicev1.Release, *metav1.Condition) {
	f.t.Helper()
	_, err := f.rec.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(f.release)})
	require.NoError(f.t, err)
	rel := f.get()
	c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted)
	require.NotNil(f.t, c)
	return rel, c
}

func TestDrift_warnReportsATerraformResourceChangedInStateByAnotherRun(t *testing.T) {
	f := newTFFixture(t)

	// Clean: the state holds what the approved plan applied.
	rel, c := f.check()
	require.Equal(t, metav1.ConditionFalse, c.Status, c.Message)
	require.Nil(t, rel.Status.Drift)
	rv := rel.ResourceVersion
	rel, _ = f.check()
	require.Equal(t, rv, rel.ResourceVersion, "a clean check writes nothing")

	// Someone with access to the state applies another input with a
	// second terraform run.
	f.run("large")
	rel, c = f.check()
	require.Equal(t, metav1.ConditionTrue, c.Status, c.Message)
	require.Equal(t, sluicev1.ReasonDriftDetected, c.Reason)
	require.Contains(t, c.Message, "terraform_data.db")
	require.NotNil(t, rel.Status.Drift)
	require.Equal(t, f.applied.Name, rel.Status.Drift.Change)
	require.Equal(t, []sluicev1.DriftedObject{{Kind: TerraformKind, Name: "terraform_data.db", Change: sluicev1.DriftChanged,
		Fields: []string{"input", "output"}}}, rel.Status.Drift.Objects)
	require.Empty(t, rel.Annotations[sluicev1.AnnotationReplan], "warn asks for nothing")
	require.NotContains(t, c.Message, "db-large", "values are never shown")
}

// TerraformFixture is the fixture for the audit test (package drift_test,
// which may import the plugin).
type TerraformFixture = tfFixture

// NewTerraformFixture is newTFFixture.
func NewTerraformFixture(t *testing.T) *TerraformFixture { return newTFFixture(t) }

// Namespace is the fixture's control namespace.
func (f *tfFixture) Namespace() string { return f.release.Namespace }

// RunTerraform applies the stack with size to the release's state, as a
// second terraform run with access to the state would.
func (f *tfFixture) RunTerraform(size string) { f.run(size) }

// CheckDrift runs one drift pass and returns the Drifted condition's
// status.
func (f *tfFixture) CheckDrift() metav1.ConditionStatus {
	_, c := f.check()
	return c.Status
}

// MarkApplied sets the applied change's phase to Applied, as the
// operator does after the apply.
func (f *tfFixture) MarkApplied() {
	f.t.Helper()
	cr := f.applied.DeepCopy()
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(cr), cr))
	orig := cr.DeepCopy()
	cr.Status.Phase = sluicev1.PhaseApplied
	require.NoError(f.t, env.Client.Status().Patch(context.Background(), cr, client.MergeFrom(orig)))
}

// TestDrift_terraformPlansWithTheApprovedPlansVariables: the drift plan
// uses the variables the approved plan was made with, so a variable
// changed on the Release after the apply (a new change on its way) is not
// drift; a change in the state still is.
func TestDrift_terraformPlansWithTheApprovedPlansVariables(t *testing.T) {
	f := newTFFixture(t)
	rel := f.get()
	orig := rel.DeepCopy()
	rel.Spec.Terraform.Vars = map[string]string{"size": "large"}
	require.NoError(t, env.Client.Patch(context.Background(), rel, client.MergeFrom(orig)))

	rel, c := f.check()
	require.Equal(t, metav1.ConditionFalse, c.Status, "a variable changed on the Release is no drift: %s", c.Message)
	require.Nil(t, rel.Status.Drift)

	f.run("medium")
	_, c = f.check()
	require.Equal(t, metav1.ConditionTrue, c.Status, c.Message)
	require.Contains(t, c.Message, "terraform_data.db changed")
}

// Destroy destroys the stack's resources in the state with a second
// terraform run.
func (f *tfFixture) Destroy() { f.destroy() }

// Replan plans the applied change's configuration, with its approved
// plan's variables, against the release's state as it is now: what the
// syncer's re-plan of the applied revision plans.
func (f *tfFixture) Replan() *tf.PlanResult {
	f.t.Helper()
	repo := &sluicev1.Repository{}
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.repo), repo))
	res, err := f.applier.PlanApplied(context.Background(), applier.ReleaseOf(f.get()), repo, f.applied)
	require.NoError(f.t, err)
	return res
}

// Release is the fixture's Release as the API server has it.
func (f *tfFixture) Release() *sluicev1.Release { return f.get() }

// Applied is the applied ChangeRequest as the API server has it.
func (f *tfFixture) Applied() *sluicev1.ChangeRequest {
	f.t.Helper()
	cr := &sluicev1.ChangeRequest{}
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.applied), cr))
	return cr
}

// StateSecret is the name of the release's state Secret.
func (f *tfFixture) StateSecret() string {
	return tfapplier.StateSecretName("default", f.release.Name)
}
