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
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
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

	// The approved change, applied as the Terraform applier does.
	plan := f.run("small")
	tb := artifacttest.Tarball(f.files)
	gz := artifacttest.Gzip(tb)
	commit := appliertest.RandomSHA()
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, commit, 1), Namespace: ctl,
			Labels: map[string]string{sluicev1.LabelRelease: f.release.Name}},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: commit, Attempt: 1, TargetNamespace: "db-staging", Delivery: sluicev1.DeliveryHelm,
			Artifact:       sluicev1.ArtifactReference{URL: server.Put(ctl+"/"+commit+".tar.gz", gz), SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			PlanDigest:     sluicev1.Digest(plan.Report.PlanDigest),
			PlanFileSHA256: sluicev1.Digest(plan.Report.PlanFileSHA256),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			Rule:           sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
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
		Spec: sluicev1.ApprovalSpec{Release: f.release.Name, ApprovalDigest: cr.Spec.ApprovalDigest, Decision: sluicev1.DecisionApprove,
			Approver: "k8s:alice", Source: sluicev1.SourceKubernetes},
	}))
	rel := f.get()
	orig := rel.DeepCopy()
	rel.Status.AppliedChange, rel.Status.LastSyncedCommit = cr.Name, commit
	require.NoError(t, c.Status().Patch(ctx, rel, client.MergeFrom(orig)))

	fetcher, err := artifact.NewFetcher(server.BaseURL())
	require.NoError(t, err)
	fetcher.TempDir = t.TempDir()
	a, err := tfapplier.New(tfapplier.Options{Config: env.Config, Fetcher: fetcher, Runner: &runner.Local{}, State: state, Log: logr.Discard()})
	require.NoError(t, err)
	f.rec = &Reconciler{Client: c, Terraform: &TerraformChecker{Planner: a}, Metrics: metrics.NewDrift()}
	return f
}

// run plans the stack with size and applies that plan to the release's
// state through the state server with an apply credential: the applier's
// run for the approved change, or an attacker's second terraform run
// (someone with console access to the state).
func (f *tfFixture) run(size string) *tf.PlanResult {
	f.t.Helper()
	dir := f.t.TempDir()
	for n, b := range f.files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.t, os.WriteFile(p, b, 0o644))
	}
	stack := filepath.Join(dir, "services/db/terraform")
	cred := tfstatetest.Grant(f.t, f.state, tfstate.Grant{Namespace: f.release.Namespace, Release: f.release.Name, Mode: tfstate.ModeApply, TTL: time.Hour})
	ex := tf.ExecOptions{Runner: &runner.Local{}, Env: cred.Env()}
	res, err := tf.Plan(context.Background(), tf.PlanOptions{ExecOptions: ex, Root: dir, Dir: stack, Vars: map[string]string{"size": size}, Backend: tf.BackendHTTP})
	require.NoError(f.t, err)
	_, err = tf.Apply(context.Background(), tf.ApplyOptions{ExecOptions: ex, Root: dir, Dir: stack, PlanFile: res.PlanFile,
		PlanFileSHA256: res.Report.PlanFileSHA256, Backend: tf.BackendHTTP})
	require.NoError(f.t, err)
	return res
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
