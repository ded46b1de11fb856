package helm

// End-to-end tests of an approved Delete change through the operator's
// manager: the real Helm SDK (this package's applier), the Terraform
// applier in front of it as cmd/operator registers it, real terraform with
// terraform_data and its kubernetes state backend.

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	tfapplier "github.com/sluice-gitops/sluice/operator/internal/applier/terraform"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

// deleteFixture is the Helm fixture plus a Terraform stack, rights for the
// state in the control namespace, and an admin kubeconfig for planning as
// the syncer does.
type deleteFixture struct {
	*fixture
	// state serves the release's Terraform state to runs, as the syncer's
	// and the operator's state servers do.
	state *tfstate.Server
}

func newDeleteFixture(t *testing.T) *deleteFixture {
	t.Helper()
	f := &deleteFixture{fixture: newFixture(t)}
	ctx := context.Background()
	require.NoError(t, env.GrantRole(ctx, f.ctl, "terraform-state", types.NamespacedName{Namespace: f.ctl, Name: "deployer"},
		[]rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
		},
		authorizationv1.ResourceAttributes{Verb: "delete", Resource: "secrets"}))
	f.release.Spec.Terraform = &sluicev1.TerraformSource{Dir: "services/web/terraform", Vars: map[string]string{"size": "small"}}
	f.state = tfstatetest.New(t, env.Config, tfstate.Options{})
	return f
}

// stackDir writes the fixture's files into a new folder and returns it.
func (f *deleteFixture) stackDir() string {
	f.t.Helper()
	dir := f.t.(*testing.T).TempDir()
	for n, b := range f.files() {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.t, os.WriteFile(p, b, 0o644))
	}
	return dir
}

// credential is a run credential for the release's state.
func (f *deleteFixture) credential(mode tfstate.Mode) map[string]string {
	f.t.Helper()
	return tfstatetest.Grant(f.t, f.state, tfstate.Grant{Namespace: f.ctl, Release: f.release.Name, Mode: mode}).Env()
}

// files is the artifact of a revision: chart, values and the stack.
func (f *deleteFixture) files() map[string][]byte {
	files := f.tree("message: hello\n")
	files["services/web/terraform/main.tf"] = []byte(appliertest.TerraformStack)
	return files
}

// plan plans the stack as the syncer does: through the sandboxed runner,
// with a plan-only credential for the release's state.
func (f *deleteFixture) plan(size string, destroy bool) *tf.PlanResult {
	f.t.Helper()
	dir := f.stackDir()
	res, err := tf.Plan(context.Background(), tf.PlanOptions{
		ExecOptions: tf.ExecOptions{Runner: &runner.Local{}, Env: f.credential(tfstate.ModePlan)},
		Root:        dir,
		Dir:         filepath.Join(dir, "services/web/terraform"),
		Vars:        map[string]string{"size": size},
		Backend:     tf.BackendHTTP,
		Destroy:     destroy,
	})
	require.NoError(f.t, err)
	return res
}

// applyDirectly changes the state behind Sluice's back (a plan of size
// applied with an apply credential of its own).
func (f *deleteFixture) applyDirectly(size string) {
	f.t.Helper()
	res := f.plan(size, false)
	dir := f.stackDir()
	_, err := tf.Apply(context.Background(), tf.ApplyOptions{
		ExecOptions: tf.ExecOptions{Runner: &runner.Local{}, Env: f.credential(tfstate.ModeApply)},
		Root:        dir,
		Dir:         filepath.Join(dir, "services/web/terraform"), PlanFile: res.PlanFile, PlanFileSHA256: res.Report.PlanFileSHA256,
		Backend: tf.BackendHTTP,
	})
	require.NoError(f.t, err)
}

// newChange is a change of the fixture's files with plan, as the syncer
// records it.
func (f *deleteFixture) newChange(name func(string) string, op sluicev1.Operation, plan *tf.PlanResult, rule sluicev1.ApprovalRule, risk sluicev1.Risk) *sluicev1.ChangeRequest {
	f.t.Helper()
	files := f.files()
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	commit := appliertest.RandomSHA()
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: name(commit), Namespace: f.ctl, Labels: map[string]string{sluicev1.LabelRelease: f.release.Name}},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Operation: op, Revision: commit, Attempt: 1, TargetNamespace: f.target, Delivery: sluicev1.DeliveryHelm,
			Source:         appliertest.SourceOf(f.release.Spec),
			Artifact:       sluicev1.ArtifactReference{URL: server.Put(f.ctl+"/"+commit+".tar.gz", gz), SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: validatorDigest(f.t, files, "charts/web", []string{"services/web/values.yaml", "services/web/values-staging.yaml"}, f.release.Name, f.target),
			PlanDigest:     sluicev1.Digest(plan.Report.PlanDigest),
			PlanFileSHA256: sluicev1.Digest(plan.Report.PlanFileSHA256),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: risk},
			Rule:           rule,
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	ctx := context.Background()
	require.NoError(f.t, env.Client.Create(ctx, cr))
	require.NoError(f.t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.PlanSecretName(cr.Name, 0), Namespace: f.ctl},
		Type:       corev1.SecretTypeOpaque, Data: map[string][]byte{sluicev1.PlanSecretKey: plan.PlanFile},
	}))
	return cr
}

// applied installs the release (chart and a small database) through the
// manager and returns the applied change.
func (f *deleteFixture) applied() *sluicev1.ChangeRequest {
	f.t.Helper()
	ctx := context.Background()
	require.NoError(f.t, env.Client.Create(ctx, f.repo))
	f.release.Spec.Rule = sluicev1.ApprovalRule{Required: 1}
	require.NoError(f.t, env.Client.Create(ctx, f.release))
	cr := f.newChange(func(c string) string { return sluicev1.ChangeRequestName(f.release.Name, c, 1) }, "",
		f.plan("small", false), sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}, sluicev1.RiskLow)
	// The release's own rule needs one approval.
	f.approve(cr)
	f.waitPhase(cr, sluicev1.PhaseApplied)
	require.Len(f.t, f.helmHistory(), 1)
	require.Equal(f.t, "db-small", f.stateOutput())
	require.Eventually(f.t, func() bool {
		rel := &sluicev1.Release{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel) == nil && rel.Status.AppliedChange == cr.Name
	}, time.Minute, 50*time.Millisecond)
	return cr
}

// proposeDelete records the Delete change the syncer proposes: a destroy
// plan of the applied configuration, risk high, the applied rule.
func (f *deleteFixture) proposeDelete(applied *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	f.t.Helper()
	plan := f.plan("small", true)
	require.Equal(f.t, 1, plan.Report.Counts.Delete, "the destroy plan destroys the database")
	return f.newChangeWith(plan, func(cr *sluicev1.ChangeRequest) {
		cr.Spec.Deletion = &sluicev1.DeletionSpec{AppliedChange: applied.Name, AppliedRevision: applied.Spec.Revision, AppliedDigest: applied.Spec.ApprovalDigest,
			TargetNamespace: applied.Spec.TargetNamespace, Delivery: applied.Spec.Delivery, Source: applied.Spec.Source.DeepCopy(),
			Terraform: applied.Spec.Source.Terraform.DeepCopy()}
	})
}

func (f *deleteFixture) newChangeWith(plan *tf.PlanResult, mutate func(*sluicev1.ChangeRequest)) *sluicev1.ChangeRequest {
	// newChange creates the object; the deletion spec has to be in it
	// from the start (the spec is immutable), so build it here.
	f.t.Helper()
	files := f.files()
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	commit := appliertest.RandomSHA()
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.DeleteChangeRequestName(f.release.Name, commit, 1), Namespace: f.ctl, Labels: map[string]string{sluicev1.LabelRelease: f.release.Name}},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Operation: sluicev1.OperationDelete, Revision: commit, Attempt: 1, TargetNamespace: f.target, Delivery: sluicev1.DeliveryHelm,
			Artifact:       sluicev1.ArtifactReference{URL: server.Put(f.ctl+"/"+commit+".tar.gz", gz), SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: validatorDigest(f.t, files, "charts/web", []string{"services/web/values.yaml", "services/web/values-staging.yaml"}, f.release.Name, f.target),
			PlanDigest:     sluicev1.Digest(plan.Report.PlanDigest),
			PlanFileSHA256: sluicev1.Digest(plan.Report.PlanFileSHA256),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskHigh},
			Rule:           sluicev1.ApprovalRule{Required: 1},
		},
	}
	mutate(cr)
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	ctx := context.Background()
	require.NoError(f.t, env.Client.Create(ctx, cr))
	require.NoError(f.t, env.Client.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.PlanSecretName(cr.Name, 0), Namespace: f.ctl},
		Type:       corev1.SecretTypeOpaque, Data: map[string][]byte{sluicev1.PlanSecretKey: plan.PlanFile},
	}))
	return cr
}

func (f *deleteFixture) approve(cr *sluicev1.ChangeRequest) {
	f.t.Helper()
	require.NoError(f.t, env.Client.Create(context.Background(), &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "alice-", Namespace: f.ctl},
		Spec: sluicev1.ApprovalSpec{Release: f.release.Name, ChangeRequest: cr.Name, ApprovalDigest: cr.Spec.ApprovalDigest, Decision: sluicev1.DecisionApprove,
			Approver: "k8s:alice", Source: sluicev1.SourceKubernetes},
	}))
}

func (f *deleteFixture) waitPhase(cr *sluicev1.ChangeRequest, want sluicev1.ChangeRequestPhase) *sluicev1.ChangeRequest {
	f.t.Helper()
	got, err := env.WaitChangePhase(context.Background(), client.ObjectKeyFromObject(cr), want, 3*time.Minute)
	require.NoError(f.t, err)
	return got
}

// stateOutput reads the state's resources; "" when there is no state
// Secret, "empty" for a state without resources.
func (f *deleteFixture) stateOutput() string {
	f.t.Helper()
	var s corev1.Secret
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: tfapplier.StateSecretName("default", f.release.Name)}, &s)
	if apierrors.IsNotFound(err) {
		return ""
	}
	require.NoError(f.t, err)
	zr, err := gzip.NewReader(bytes.NewReader(s.Data["tfstate"]))
	require.NoError(f.t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(f.t, err)
	var st struct {
		Outputs   map[string]struct{ Value any } `json:"outputs"`
		Resources []json.RawMessage              `json:"resources"`
	}
	require.NoError(f.t, json.Unmarshal(raw, &st))
	if len(st.Resources) == 0 {
		return "empty"
	}
	v, _ := st.Outputs["db"].Value.(string)
	return v
}

func (f *deleteFixture) releaseGone() bool {
	err := env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), &sluicev1.Release{})
	return apierrors.IsNotFound(err)
}

// counting wraps the registered applier (Terraform chain in front of Helm)
// and counts its cleanups; hold makes the destroy step wait for the
// manager to stop.
type counting struct {
	applier.Applier
	cleanups, destroys *atomic.Int32
	hold               bool
}

func (c *counting) Cleanup(ctx context.Context, r applier.Removal, repo *sluicev1.Repository) (applier.Result, error) {
	c.cleanups.Add(1)
	return c.Applier.(applier.Cleaner).Cleanup(ctx, r, repo)
}

func (c *counting) ApplyDestroyPlan(ctx context.Context, req applier.Request) (applier.Result, error) {
	if c.hold {
		<-ctx.Done()
		return applier.Result{}, ctx.Err()
	}
	c.destroys.Add(1)
	return c.Applier.(applier.Destroyer).ApplyDestroyPlan(ctx, req)
}

func (c *counting) CheckDestroyPlan(ctx context.Context, req applier.Request) error {
	return c.Applier.(applier.Destroyer).CheckDestroyPlan(ctx, req)
}

func (c *counting) DeleteState(ctx context.Context, req applier.Request) error {
	return c.Applier.(applier.Destroyer).DeleteState(ctx, req)
}

// startDeleteManager runs the operator's manager with the Helm applier
// behind the Terraform applier, wrapped by wrap; stop ends it.
func startDeleteManager(t *testing.T, f *deleteFixture, wrap func(applier.Applier) applier.Applier) (stop func()) {
	t.Helper()
	reg := applier.Registry{sluicev1.DeliveryHelm: newApplier(t)}
	// The state server of the Terraform applier ends with the test.
	ctx := t.Context()
	flags := tfapplier.Flags{Apply: true, StateAddr: "127.0.0.1:0"}
	require.NoError(t, flags.Register(ctx, reg, env.Config, server.BaseURL(), logr.Discard()))
	if wrap != nil {
		reg[sluicev1.DeliveryHelm] = wrap(reg[sluicev1.DeliveryHelm])
	}
	mgr, err := controller.NewManager(ctx, env.Config, controller.ManagerOptions{
		Options:     controller.Options{Appliers: reg, LockRetryInterval: time.Second, SkipNameValidation: true},
		MetricsAddr: "0", ProbeAddr: "0", PprofAddr: "0",
		Namespaces: []string{f.ctl},
	})
	require.NoError(t, err)
	run := testenv.Go(t, mgr).FailOnError(t)
	return func() { require.NoError(t, run.Stop()) }
}

func TestDelete_approvedDeleteUninstallsThenDestroysThenDeletesTheRelease(t *testing.T) {
	f := newDeleteFixture(t)
	startDeleteManager(t, f, nil)
	applied := f.applied()

	del := f.proposeDelete(applied)
	got := f.waitPhase(del, sluicev1.PhaseAwaitingApproval)
	require.Equal(t, sluicev1.RiskHigh, got.Spec.Verdict.Risk)
	require.Len(t, f.helmHistory(), 1, "nothing is uninstalled before the Delete is approved")
	require.Equal(t, "db-small", f.stateOutput(), "nothing is destroyed before the Delete is approved")
	require.False(t, f.releaseGone())

	f.approve(del)
	got = f.waitPhase(del, sluicev1.PhaseApplied)
	require.Empty(t, f.helmHistory(), "the Helm release is gone")
	f.requireNothingInstalled()
	require.Equal(t, "", f.stateOutput(), "the destroy plan ran and the state Secret is deleted")
	st := got.Status.Deletion
	require.NotNil(t, st)
	require.NotNil(t, st.WorkloadRemovedAt)
	require.NotNil(t, st.InfrastructureDestroyedAt)
	require.NotNil(t, st.ReleaseDeletedAt)
	require.False(t, st.InfrastructureDestroyedAt.Before(st.WorkloadRemovedAt), "workload first, then infrastructure")
	require.Eventually(t, f.releaseGone, time.Minute, 50*time.Millisecond, "then the Release")
}

func TestDelete_aStaleDestroyPlanIsStalePlanAndDestroysNothing(t *testing.T) {
	f := newDeleteFixture(t)
	startDeleteManager(t, f, nil)
	applied := f.applied()
	del := f.proposeDelete(applied)
	f.waitPhase(del, sluicev1.PhaseAwaitingApproval)

	// The state changes between the plan's approval and its apply.
	f.applyDirectly("large")
	require.Equal(t, "db-large", f.stateOutput())
	f.approve(del)
	got := f.waitPhase(del, sluicev1.PhaseFailed)
	require.Contains(t, got.Status.Apply.Message, sluicev1.ReasonStalePlan)
	require.Equal(t, "db-large", f.stateOutput(), "a stale destroy plan destroys nothing")
	require.Nil(t, got.Status.Deletion.WorkloadRemovedAt, "found before anything was removed")
	require.Len(t, f.helmHistory(), 1, "the workload stays")
	require.False(t, f.releaseGone(), "and the Release")
}

func TestDelete_aNewerChangeSupersedesAPendingDelete(t *testing.T) {
	f := newDeleteFixture(t)
	startDeleteManager(t, f, nil)
	applied := f.applied()
	del := f.proposeDelete(applied)
	f.waitPhase(del, sluicev1.PhaseAwaitingApproval)

	// A revert push: the release is back, with a change of its own.
	// Creation times have one-second resolution: the revert is newer once
	// the clock is in a later second.
	require.Eventually(t, func() bool { return time.Now().Truncate(time.Second).After(del.CreationTimestamp.Time) }, time.Minute, 20*time.Millisecond)
	revert := f.newChange(func(c string) string { return sluicev1.ChangeRequestName(f.release.Name, c, 1) }, "",
		f.plan("small", false), sluicev1.ApprovalRule{Required: 1}, sluicev1.RiskLow)
	f.waitPhase(del, sluicev1.PhaseSuperseded)
	f.approve(del) // too late: terminal phases never change
	f.waitPhase(revert, sluicev1.PhaseAwaitingApproval)
	require.Len(t, f.helmHistory(), 1, "nothing uninstalled")
	require.Equal(t, "db-small", f.stateOutput())
	require.False(t, f.releaseGone())
}

func TestDelete_anOperatorKilledMidDeleteFinishesExactlyOnce(t *testing.T) {
	f := newDeleteFixture(t)
	var cleanups, destroys atomic.Int32
	stop := startDeleteManager(t, f, func(a applier.Applier) applier.Applier {
		return &counting{Applier: a, cleanups: &cleanups, destroys: &destroys, hold: true}
	})
	applied := f.applied()
	del := f.proposeDelete(applied)
	f.waitPhase(del, sluicev1.PhaseAwaitingApproval)
	f.approve(del)

	// Stop the operator once the Helm uninstall step is recorded, while
	// the destroy step is under way.
	require.Eventually(t, func() bool {
		cur := &sluicev1.ChangeRequest{}
		return env.Client.Get(context.Background(), client.ObjectKeyFromObject(del), cur) == nil &&
			cur.Status.Deletion != nil && cur.Status.Deletion.WorkloadRemovedAt != nil
	}, 3*time.Minute, 50*time.Millisecond)
	stop()
	require.Empty(t, f.helmHistory())
	require.Equal(t, "db-small", f.stateOutput(), "not destroyed yet")
	require.False(t, f.releaseGone())

	startDeleteManager(t, f, func(a applier.Applier) applier.Applier {
		return &counting{Applier: a, cleanups: &cleanups, destroys: &destroys}
	})
	f.waitPhase(del, sluicev1.PhaseApplied)
	require.Eventually(t, f.releaseGone, time.Minute, 50*time.Millisecond)
	require.EqualValues(t, 1, cleanups.Load(), "the uninstall ran once, the finalizer did not repeat it")
	require.EqualValues(t, 1, destroys.Load(), "the destroy plan was applied once")
	require.Equal(t, "", f.stateOutput())
}
