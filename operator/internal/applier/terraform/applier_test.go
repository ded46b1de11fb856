package terraform

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

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
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
)

var (
	env     *testenv.Env
	server  *artifacttest.Server
	state   *tfstate.Server
	counter atomic.Int32
)

func TestMain(m *testing.M) {
	runner.MaybeRunChild()
	testenv.Main(m, testenv.Options{}, setup)
}

// setup starts the artifact server and the state server every run reaches
// its release's state through, with the operator's (here: the admin's)
// connection.
func setup(e *testenv.Env) error {
	env = e
	if _, err := exec.LookPath("terraform"); err != nil {
		return fmt.Errorf("these tests need terraform on PATH: %w", err)
	}
	server = artifacttest.NewServer()
	e.Cleanup(server.Close)
	ctx, cancel := context.WithCancel(context.Background())
	e.Cleanup(cancel)
	var err error
	state, err = tfstatetest.Serve(ctx, e.Config, tfstate.Options{})
	return err
}

// stackTF is the stack of the Release db-staging.
const stackTF = appliertest.TerraformStack

// fixture is a control namespace with the ServiceAccount "deployer" (with
// a Role for the state and plan Secrets and the state lock Leases there)
// and the Release "db-staging" of a Terraform-only service.
type fixture struct {
	t       *testing.T
	ctl     string
	repo    *sluicev1.Repository
	release *sluicev1.Release
	applier *Applier
}

type fixtureOptions struct {
	noRBAC bool
	// secretVerbs replaces the Role's verbs on Secrets.
	secretVerbs []string
}

func newFixture(t *testing.T, o fixtureOptions) *fixture {
	t.Helper()
	f := &fixture{t: t, ctl: fmt.Sprintf("tf-ctl-%d", counter.Add(1))}
	ctx := context.Background()
	c := env.Client
	require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ctl}}))
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ctl}}))
	if !o.noRBAC {
		secretVerbs := []string{"get", "list", "watch", "create", "update", "patch", "delete"}
		if o.secretVerbs != nil {
			secretVerbs = o.secretVerbs
		}
		require.NoError(t, env.GrantRole(ctx, f.ctl, "terraform-state", types.NamespacedName{Namespace: f.ctl, Name: "deployer"},
			[]rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: secretVerbs},
				{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}},
			},
			authorizationv1.ResourceAttributes{Verb: "create", Group: "coordination.k8s.io", Resource: "leases"}))
	}
	f.repo = &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: f.ctl},
		Spec:       sluicev1.RepositorySpec{URL: "https://git.example.com/infra.git", ServiceAccountName: "deployer", TargetNamespaces: []string{"db-*"}},
	}
	f.release = &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "db-staging", Namespace: f.ctl},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "db", Environment: "staging", SourcePath: "services/db",
			TargetNamespace: "db-staging", Delivery: sluicev1.DeliveryHelm,
			Terraform: &sluicev1.TerraformSource{Dir: "services/db/terraform", Vars: map[string]string{"size": "small"}},
		},
	}
	f.applier = newApplier(t, &runner.Local{})
	return f
}

func newApplier(t *testing.T, run tf.Runner) *Applier {
	t.Helper()
	fetcher, err := artifact.NewFetcher(server.BaseURL())
	require.NoError(t, err)
	fetcher.TempDir = t.TempDir()
	a, err := New(Options{Config: env.Config, Fetcher: fetcher, Runner: run, State: state, Log: logr.Discard()})
	require.NoError(t, err)
	return a
}

// change plans the stack with size, as the syncer does (through a runner,
// with a plan-only credential for the release's state), stores the plan
// file in the change's plan Secret, serves the artifact and returns the
// change.
func (f *fixture) change(size string) *sluicev1.ChangeRequest {
	f.t.Helper()
	return f.changeOf(stackTF, size)
}

// changeOf is change for a stack of its own.
func (f *fixture) changeOf(mainTF, size string) *sluicev1.ChangeRequest {
	f.t.Helper()
	return f.changeWith(map[string][]byte{"services/db/terraform/main.tf": []byte(mainTF)}, size)
}

// changeWith is change for stack files of its own.
func (f *fixture) changeWith(stack map[string][]byte, size string) *sluicev1.ChangeRequest {
	f.t.Helper()
	files := map[string][]byte{"services/db/service.yaml": []byte("name: db\n")}
	for k, v := range stack {
		files[k] = v
	}
	dir := f.t.TempDir()
	for n, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.t, os.WriteFile(p, b, 0o644))
	}
	cred := tfstatetest.Grant(f.t, state, tfstate.Grant{Namespace: f.ctl, Release: f.release.Name, Mode: tfstate.ModePlan})
	res, err := tf.Plan(context.Background(), tf.PlanOptions{
		ExecOptions: tf.ExecOptions{Runner: &runner.Local{}, Env: cred.Env()},
		Root:        dir,
		Dir:         filepath.Join(dir, "services/db/terraform"),
		Vars:        map[string]string{"size": size},
		Backend:     tf.BackendHTTP,
	})
	require.NoError(f.t, err)

	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	commit := appliertest.RandomSHA()
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name: sluicev1.ChangeRequestName(f.release.Name, commit, 1), Namespace: f.ctl, UID: types.UID(appliertest.RandomSHA()),
		},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: commit, Attempt: 1, TargetNamespace: "db-staging", Delivery: sluicev1.DeliveryHelm,
			Source:         appliertest.SourceOf(f.release.Spec),
			Artifact:       sluicev1.ArtifactReference{URL: server.Put(f.ctl+"/"+commit+".tar.gz", gz), SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			PlanDigest:     sluicev1.Digest(res.Report.PlanDigest),
			PlanFileSHA256: sluicev1.Digest(res.Report.PlanFileSHA256),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	f.storePlan(cr, res.PlanFile)
	return cr
}

// storePlan writes the plan Secret(s) of cr the way the syncer does.
func (f *fixture) storePlan(cr *sluicev1.ChangeRequest, plan []byte) {
	f.t.Helper()
	for i := 0; i == 0 || i*sluicev1.PlanChunkSize < len(plan); i++ {
		chunk := plan[i*sluicev1.PlanChunkSize : min((i+1)*sluicev1.PlanChunkSize, len(plan))]
		require.NoError(f.t, env.Client.Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: sluicev1.PlanSecretName(cr.Name, i), Namespace: f.ctl},
			Type:       corev1.SecretTypeOpaque,
			Data:       map[string][]byte{sluicev1.PlanSecretKey: chunk},
		}))
	}
}

func (f *fixture) request(cr *sluicev1.ChangeRequest) applier.Request {
	return applier.Request{Change: cr, Release: applier.ReleaseOf(f.release), Repository: f.repo}
}

// stateOutput reads output "db" from the release's state Secret
// (Terraform's kubernetes backend: gzipped JSON under "tfstate"); "" when
// there is no state yet.
func (f *fixture) stateOutput() string {
	f.t.Helper()
	var s corev1.Secret
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: "tfstate-default-" + f.release.Name}, &s)
	if apierrors.IsNotFound(err) {
		return ""
	}
	require.NoError(f.t, err)
	zr, err := gzip.NewReader(bytes.NewReader(s.Data["tfstate"]))
	require.NoError(f.t, err)
	raw, err := io.ReadAll(zr)
	require.NoError(f.t, err)
	var st struct {
		Outputs map[string]struct{ Value any } `json:"outputs"`
	}
	require.NoError(f.t, json.Unmarshal(raw, &st))
	v, _ := st.Outputs["db"].Value.(string)
	return v
}

func TestApply_appliesTheApprovedPlanFileAsTheServiceAccount(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	first := f.change("small")
	// A second change planned from the same (empty) state.
	second := f.change("large")

	res, err := f.applier.Apply(ctx, f.request(first))
	require.NoError(t, err)
	require.Contains(t, res.Message, "terraform applied plan")
	require.Equal(t, "db-small", f.stateOutput(), "the state holds what the approved plan said")

	// A retry in the same process (a later step failed) applies nothing
	// again.
	res, err = f.applier.Apply(ctx, f.request(first))
	require.NoError(t, err)
	require.Equal(t, "terraform plan already applied", res.Message)

	// The other plan was made before the state moved: stale, nothing applied.
	_, err = f.applier.Apply(ctx, f.request(second))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonStalePlan)
	require.Contains(t, fail.Message, sluicev1.AnnotationReplan)
	require.Equal(t, "db-small", f.stateOutput())

	// A fresh operator (restarted before it recorded the first change) is
	// stopped by terraform itself: the plan is stale now. The state already
	// holds the approved configuration, so the change counts as applied,
	// and nothing is applied twice.
	res, err = newApplier(t, &runner.Local{}).Apply(ctx, f.request(first))
	require.NoError(t, err)
	require.Contains(t, res.Message, "already in place")
	require.Equal(t, "db-small", f.stateOutput())

	// A re-plan from the new state goes through.
	third := f.change("large")
	_, err = f.applier.Apply(ctx, f.request(third))
	require.NoError(t, err)
	require.Equal(t, "db-large", f.stateOutput())
}

func TestApply_refusesAPlanOtherThanTheApprovedOne(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	approved := f.change("small")
	other := f.change("huge")

	// The plan Secret of the approved change holds another plan file.
	var s corev1.Secret
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ctl, Name: sluicev1.PlanSecretName(other.Name, 0)}, &s))
	var mine corev1.Secret
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.ctl, Name: sluicev1.PlanSecretName(approved.Name, 0)}, &mine))
	mine.Data = s.Data
	require.NoError(t, env.Client.Update(ctx, &mine))
	_, err := f.applier.Apply(ctx, f.request(approved))
	appliertest.RequireFailure(t, err, sluicev1.ReasonDigestMismatch)

	// No plan Secret at all.
	require.NoError(t, env.Client.Delete(ctx, &mine))
	_, err = f.applier.Apply(ctx, f.request(approved))
	appliertest.RequireFailure(t, err, sluicev1.ReasonDigestMismatch)

	// An artifact whose content is not what was approved.
	tampered := other.DeepCopy()
	tampered.Spec.ContentDigest = sluicev1.SHA256Digest([]byte("something else"))
	_, err = f.applier.Apply(ctx, f.request(tampered))
	appliertest.RequireFailure(t, err, sluicev1.ReasonDigestMismatch)
	require.Empty(t, f.stateOutput(), "nothing was applied")
}

func TestApply_aServiceAccountWithoutRightsFailsWithAReadableReason(t *testing.T) {
	f := newFixture(t, fixtureOptions{noRBAC: true})
	cr := f.change("small")
	_, err := f.applier.Apply(context.Background(), f.request(cr))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, f.ctl+":deployer may not read the plan Secret")
	require.Contains(t, fail.Message, "give it a Role there")
	require.Empty(t, f.stateOutput())

	f.repo.Spec.ServiceAccountName = "nobody"
	_, err = f.applier.Apply(context.Background(), f.request(cr))
	fail = appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "ServiceAccount "+f.ctl+"/nobody does not exist")
}

func TestApply_refusesAChangeItCannotCheck(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	cr := f.change("small")
	cases := map[string]func(*sluicev1.ChangeRequest){
		"no plan digest":               func(c *sluicev1.ChangeRequest) { c.Spec.PlanFileSHA256 = "" },
		"a change without a source":    func(c *sluicev1.ChangeRequest) { c.Spec.Source = nil },
		"a source without a stack":     func(c *sluicev1.ChangeRequest) { c.Spec.Source.Terraform = nil },
		"a stack outside the artifact": func(c *sluicev1.ChangeRequest) { c.Spec.Source.Terraform.Dir = "../../etc" },
		"a stack the artifact lacks":   func(c *sluicev1.ChangeRequest) { c.Spec.Source.Terraform.Dir = "services/other" },
	}
	for name, edit := range cases {
		t.Run(name, func(t *testing.T) {
			c := cr.DeepCopy()
			edit(c)
			_, err := f.applier.Apply(context.Background(), f.request(c))
			fail := appliertest.RequireFailure(t, err, sluicev1.ReasonInvalidSpec)
			if c.Spec.Source == nil {
				require.Contains(t, fail.Message, "re-plan", "the message says what to do")
			}
		})
	}
	require.Empty(t, f.stateOutput())
}

// recorder is the next applier of a chain in the tests: it records calls
// and what the state held when it was called.
type recorder struct {
	f      *fixture
	mu     sync.Mutex
	calls  int
	state  string
	result error
}

func (r *recorder) Name() string { return "helm" }

func (r *recorder) Apply(context.Context, applier.Request) (applier.Result, error) {
	state := r.f.stateOutput()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	r.state = state
	return applier.Result{Message: "manifests applied"}, r.result
}

// seen returns the calls so far and the state the last one saw.
func (r *recorder) seen() (int, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls, r.state
}

func TestChain_appliesTerraformFirstThenTheManifests(t *testing.T) {
	f := newFixture(t, fixtureOptions{})
	ctx := context.Background()
	next := &recorder{f: f}
	c := Chain(f.applier, next)
	require.Equal(t, "helm", c.Name())

	// A service with a chart: Terraform, then the manifests, which see the
	// applied state.
	f.release.Spec.Chart = sluicev1.ChartSource{Path: "charts/service"}
	cr := f.change("small")
	cr.Spec.ManifestDigest = sluicev1.SHA256Digest([]byte("manifests"))
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	res, err := c.Apply(ctx, f.request(cr))
	require.NoError(t, err)
	require.Equal(t, 1, next.calls)
	require.Equal(t, "db-small", next.state, "the manifests go after the infrastructure")
	require.Contains(t, res.Message, "terraform applied plan")
	require.Contains(t, res.Message, "manifests applied")
	_, remembered := f.applier.applied.Load(appliedKey(cr))
	require.False(t, remembered, "a settled change is forgotten")

	// The manifests fail with a retryable error: the retry does not apply
	// the plan again (it would be stale), it goes on to the manifests.
	second := f.change("large")
	second.Spec.ManifestDigest = sluicev1.SHA256Digest([]byte("manifests 2"))
	second.Spec.ApprovalDigest = second.ExpectedApprovalDigest()
	next.result = errors.New("the API server is away")
	_, err = c.Apply(ctx, f.request(second))
	require.Error(t, err)
	_, remembered = f.applier.applied.Load(appliedKey(second))
	require.True(t, remembered, "kept for the retry")
	next.result = nil
	_, err = c.Apply(ctx, f.request(second))
	require.NoError(t, err)
	require.Equal(t, 3, next.calls)
	require.Equal(t, "db-large", f.stateOutput())

	// A Terraform-only service: the manifests step is skipped.
	f.release.Spec.Chart = sluicev1.ChartSource{}
	third := f.change("huge")
	_, err = c.Apply(ctx, f.request(third))
	require.NoError(t, err)
	require.Equal(t, 3, next.calls)
	require.Equal(t, "db-huge", f.stateOutput())

	// A failing plan stops the chain before the manifests.
	stale := f.change("tiny")
	_, err = c.Apply(ctx, f.request(f.change("small")))
	require.NoError(t, err)
	_, err = c.Apply(ctx, f.request(stale))
	appliertest.RequireFailure(t, err, sluicev1.ReasonStalePlan)
	require.Equal(t, 3, next.calls)

	// A change without a plan goes straight to the manifests.
	helmOnly := stale.DeepCopy()
	helmOnly.Spec.PlanFileSHA256, helmOnly.Spec.PlanDigest = "", ""
	_, err = c.Apply(ctx, f.request(helmOnly))
	require.NoError(t, err)
	require.Equal(t, 4, next.calls)
}
