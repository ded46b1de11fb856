package drift

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sync/atomic"
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
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/operator/api/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	helmapplier "github.com/sluice-gitops/sluice/operator/internal/applier/helm"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

var (
	env     *testenv.Env
	server  *artifacttest.Server
	counter atomic.Int32
)

func TestMain(m *testing.M) {
	runner.MaybeRunChild()
	var err error
	env, err = testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = artifacttest.NewServer()
	code := m.Run()
	server.Close()
	_ = env.Stop()
	os.Exit(code)
}

// fixture is one Repository (drift mode as given) with a control
// namespace, a target namespace, a ServiceAccount and the Release
// web-staging, plus a running operator (gate, Helm applier, drift).
type fixture struct {
	t       *testing.T
	ctl     string
	target  string
	repo    *sluicev1.Repository
	release *sluicev1.Release
}

func newFixture(t *testing.T, mode sluicev1.DriftMode) *fixture {
	t.Helper()
	n := counter.Add(1)
	f := &fixture{t: t, ctl: fmt.Sprintf("drift-ctl-%d", n), target: fmt.Sprintf("web-drift-%d", n)}
	ctx := context.Background()
	c := env.Client
	for _, ns := range []string{f.ctl, f.target} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ctl}}))
	require.NoError(t, env.GrantRole(ctx, f.target, "deployer", types.NamespacedName{Namespace: f.ctl, Name: "deployer"},
		[]rbacv1.PolicyRule{{APIGroups: []string{"", "apps"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}))
	f.repo = &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: f.ctl},
		Spec: sluicev1.RepositorySpec{
			URL: "https://git.example.com/infra.git", ServiceAccountName: "deployer",
			TargetNamespaces: []string{"web-*"},
			Drift:            &sluicev1.DriftPolicy{Mode: mode, Interval: &metav1.Duration{Duration: 10 * time.Second}},
		},
	}
	require.NoError(t, c.Create(ctx, f.repo))
	f.release = &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "web-staging", Namespace: f.ctl},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "web", Environment: "staging", SourcePath: "services/web",
			TargetNamespace: f.target, Chart: sluicev1.ChartSource{Path: "charts/web"},
			Values: []sluicev1.RelativePath{"values.yaml", "values-staging.yaml"}, Delivery: sluicev1.DeliveryHelm,
			Rule: sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
	}
	require.NoError(t, c.Create(ctx, f.release))
	return f
}

// startOperator runs the operator's reconcilers (gate and Helm applier)
// and the drift controller for the fixture's control namespace.
func (f *fixture) startOperator() {
	t := f.t
	scheme, err := controller.NewScheme()
	require.NoError(t, err)
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{f.ctl: {}}},
		Logger:  logr.Discard(),
	})
	require.NoError(t, err)
	fetcher, err := artifact.NewFetcher(server.BaseURL())
	require.NoError(t, err)
	fetcher.TempDir = t.TempDir()
	ha, err := helmapplier.New(helmapplier.Options{Config: env.Config, Fetcher: fetcher, Log: logr.Discard()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, controller.Setup(ctx, mgr, controller.Options{
		Appliers: applier.Registry{sluicev1.DeliveryHelm: ha}, LockRetryInterval: time.Second, SkipNameValidation: true,
	}))
	require.NoError(t, Setup(mgr, Options{Config: env.Config, SkipNameValidation: true}))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// tree is an artifact's content: the chart, the manifest and the values.
func (f *fixture) tree(stagingValues string) map[string][]byte {
	files := map[string][]byte{
		"services/web/service.yaml": []byte(fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
owners: [team-web]
chart: {path: charts/web}
values: [values.yaml]
environments:
  - name: staging
    namespace: %s
    values: [values-staging.yaml]
    delivery: helm
    approval: {required: 1, autoApproveRisk: none}
`, f.target)),
		"services/web/values.yaml":         []byte("replicas: 1\n"),
		"services/web/values-staging.yaml": []byte(stagingValues),
	}
	root := filepath.Join("testdata", "charts", "web")
	require.NoError(f.t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[path.Join("charts/web", filepath.ToSlash(rel))] = b
		return nil
	}))
	return files
}

// manifestDigest is what the validator records for the files.
func (f *fixture) manifestDigest(files map[string][]byte) sluicev1.Digest {
	dir := f.t.TempDir()
	for n, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.t, os.WriteFile(p, b, 0o644))
	}
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{
		Chart:       filepath.Join(dir, "charts/web"),
		ValuesFiles: []string{filepath.Join(dir, "services/web/values.yaml"), filepath.Join(dir, "services/web/values-staging.yaml")},
		ReleaseName: f.release.Name, Namespace: f.target,
	})
	require.NoError(f.t, err)
	return sluicev1.Digest(res.ManifestDigest)
}

// change is the ChangeRequest the syncer would make for a commit (attempt
// n at that commit), with its artifact served.
func (f *fixture) change(commit string, attempt int32, stagingValues string) *sluicev1.ChangeRequest {
	files := f.tree(stagingValues)
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	url := server.Put(fmt.Sprintf("%s/%s-%d.tar.gz", f.ctl, commit, attempt), gz)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, commit, attempt), Namespace: f.ctl,
			Labels: map[string]string{sluicev1.LabelRelease: f.release.Name}},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: commit, Attempt: attempt, TargetNamespace: f.target, Delivery: sluicev1.DeliveryHelm,
			Artifact:       sluicev1.ArtifactReference{URL: url, SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: f.manifestDigest(files),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			Rule:           sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	require.NoError(f.t, env.Client.Create(context.Background(), cr))
	return cr
}

// approve records alice's approval of a change.
func (f *fixture) approve(cr *sluicev1.ChangeRequest) *sluicev1.Approval {
	a := &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: cr.Name + "-", Namespace: f.ctl},
		Spec: sluicev1.ApprovalSpec{Release: f.release.Name, ApprovalDigest: cr.Spec.ApprovalDigest, Decision: sluicev1.DecisionApprove,
			Approver: "k8s:alice", Source: sluicev1.SourceKubernetes},
	}
	require.NoError(f.t, env.Client.Create(context.Background(), a))
	return a
}

// applyFirst makes, approves and applies the first change, and marks the
// syncer's view (lastSyncedCommit) at its revision.
func (f *fixture) applyFirst() *sluicev1.ChangeRequest {
	commit := appliertest.RandomSHA()
	cr := f.change(commit, 1, "message: hello from staging\nimage: registry.example.com/web:1.0.0\n")
	f.approve(cr)
	got, err := env.WaitChangePhase(context.Background(), client.ObjectKeyFromObject(cr), sluicev1.PhaseApplied, 2*time.Minute)
	require.NoError(f.t, err)
	f.setSynced(commit)
	return got
}

// setSynced records, as the syncer does, the newest commit of the release.
func (f *fixture) setSynced(commit string) {
	rel := &sluicev1.Release{}
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), rel))
	orig := rel.DeepCopy()
	rel.Status.LastSyncedCommit = commit
	require.NoError(f.t, env.Client.Status().Patch(context.Background(), rel, client.MergeFrom(orig)))
}

// waitDrifted waits for the Release's Drifted condition to have status
// want and returns the Release.
func (f *fixture) waitDrifted(want metav1.ConditionStatus) *sluicev1.Release {
	f.t.Helper()
	var rel *sluicev1.Release
	require.Eventually(f.t, func() bool {
		rel = &sluicev1.Release{}
		require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), rel))
		c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted)
		return c != nil && c.Status == want
	}, 90*time.Second, 200*time.Millisecond, "Drifted never became %s", want)
	return rel
}
