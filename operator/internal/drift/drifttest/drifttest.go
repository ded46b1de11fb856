// Package drifttest is the drift and audit tests' fixture: a Repository, a
// Release of a small web chart installed for real by the operator's gate
// and Helm applier in envtest, and the tampering a person with kubectl
// would do.
package drifttest

import (
	"context"
	"embed"
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
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	autoscalingv1 "k8s.io/api/autoscaling/v1"
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
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	helmapplier "github.com/sluice-gitops/sluice/operator/internal/applier/helm"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

//go:embed all:chart
var chart embed.FS

var counter atomic.Int32

// TamperedImage is the image Tamper puts in the Deployment.
const TamperedImage = "registry.example.com/miner:6.6.6"

// Fixture is one Repository (drift mode as given) with a control
// namespace, a target namespace, a ServiceAccount and the Release
// web-staging (one approval required).
type Fixture struct {
	T       *testing.T
	Env     *testenv.Env
	Server  *artifacttest.Server
	Ctl     string
	Target  string
	Repo    *sluicev1.Repository
	Release *sluicev1.Release
}

// New creates the fixture's objects.
func New(t *testing.T, env *testenv.Env, server *artifacttest.Server, mode sluicev1.DriftMode) *Fixture {
	t.Helper()
	n := counter.Add(1)
	f := &Fixture{T: t, Env: env, Server: server, Ctl: fmt.Sprintf("drift-ctl-%d-%d", os.Getpid(), n), Target: fmt.Sprintf("web-drift-%d-%d", os.Getpid(), n)}
	ctx := context.Background()
	c := env.Client
	for _, ns := range []string{f.Ctl, f.Target} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.Ctl}}))
	require.NoError(t, env.GrantRole(ctx, f.Target, "deployer", types.NamespacedName{Namespace: f.Ctl, Name: "deployer"},
		[]rbacv1.PolicyRule{{APIGroups: []string{"", "apps"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
		authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}))
	f.Repo = &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: f.Ctl},
		Spec: sluicev1.RepositorySpec{
			URL: "https://git.example.com/infra.git", ServiceAccountName: "deployer",
			TargetNamespaces: []string{"web-*"},
			Drift:            &sluicev1.DriftPolicy{Mode: mode, Interval: &metav1.Duration{Duration: 10 * time.Second}},
		},
	}
	require.NoError(t, c.Create(ctx, f.Repo))
	f.Release = &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "web-staging", Namespace: f.Ctl},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "web", Environment: "staging", SourcePath: "services/web",
			TargetNamespace: f.Target, Chart: sluicev1.ChartSource{Path: "charts/web"},
			Values: []sluicev1.RelativePath{"values.yaml", "values-staging.yaml"}, Delivery: sluicev1.DeliveryHelm,
			Rule: sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
	}
	require.NoError(t, c.Create(ctx, f.Release))
	return f
}

// Start runs the operator's reconcilers (gate and Helm applier) for the
// fixture's control namespace, plus whatever setups add (the drift
// controller), until the test ends.
func (f *Fixture) Start(setups ...func(ctrl.Manager) error) {
	t := f.T
	scheme, err := controller.NewScheme()
	require.NoError(t, err)
	mgr, err := ctrl.NewManager(f.Env.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{f.Ctl: {}}},
		Logger:  logr.Discard(),
	})
	require.NoError(t, err)
	fetcher, err := artifact.NewFetcher(f.Server.BaseURL())
	require.NoError(t, err)
	fetcher.TempDir = t.TempDir()
	ha, err := helmapplier.New(helmapplier.Options{Config: f.Env.Config, Fetcher: fetcher, Log: logr.Discard()})
	require.NoError(t, err)
	require.NoError(t, controller.Setup(context.Background(), mgr, controller.Options{
		Appliers: applier.Registry{sluicev1.DeliveryHelm: ha}, LockRetryInterval: time.Second, SkipNameValidation: true,
	}))
	for _, s := range setups {
		require.NoError(t, s(mgr))
	}
	testenv.Go(t, mgr).FailOnError(t)
}

// Values is the honest staging values file of the first change.
const Values = "message: hello from staging\nimage: registry.example.com/web:1.0.0\n"

// tree is an artifact's content: the chart, the manifest and the values.
func (f *Fixture) tree(stagingValues string) map[string][]byte {
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
`, f.Target)),
		"services/web/values.yaml":         []byte("replicas: 1\n"),
		"services/web/values-staging.yaml": []byte(stagingValues),
	}
	require.NoError(f.T, fs.WalkDir(chart, "chart", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := chart.ReadFile(p)
		if err != nil {
			return err
		}
		files[path.Join("charts/web", p[len("chart/"):])] = b
		return nil
	}))
	return files
}

// manifestDigest is what the validator records for the files.
func (f *Fixture) manifestDigest(files map[string][]byte) sluicev1.Digest {
	dir := f.T.TempDir()
	for n, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(f.T, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.T, os.WriteFile(p, b, 0o644))
	}
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{
		Chart:       filepath.Join(dir, "charts/web"),
		ValuesFiles: []string{filepath.Join(dir, "services/web/values.yaml"), filepath.Join(dir, "services/web/values-staging.yaml")},
		ReleaseName: f.Release.Name, Namespace: f.Target,
	})
	require.NoError(f.T, err)
	require.NotEmpty(f.T, res.ManifestDigest, "findings: %v", res.Findings)
	return sluicev1.Digest(res.ManifestDigest)
}

// Change creates the ChangeRequest the syncer would make for a commit
// (attempt n at that commit), with its artifact served.
func (f *Fixture) Change(commit string, attempt int32, stagingValues string) *sluicev1.ChangeRequest {
	files := f.tree(stagingValues)
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	url := f.Server.Put(fmt.Sprintf("%s/%s-%d.tar.gz", f.Ctl, commit, attempt), gz)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.Release.Name, commit, attempt), Namespace: f.Ctl,
			Labels: map[string]string{sluicev1.LabelRelease: f.Release.Name}},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.Release.Name, Revision: commit, Attempt: attempt, TargetNamespace: f.Target, Delivery: sluicev1.DeliveryHelm,
			Source:         appliertest.SourceOf(f.Release.Spec),
			Artifact:       sluicev1.ArtifactReference{URL: url, SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: f.manifestDigest(files),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			Rule:           sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	require.NoError(f.T, f.Env.Client.Create(context.Background(), cr))
	return cr
}

// Approve records alice's approval of a change.
func (f *Fixture) Approve(cr *sluicev1.ChangeRequest) *sluicev1.Approval {
	a := &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: cr.Name + "-", Namespace: f.Ctl},
		Spec: sluicev1.ApprovalSpec{Release: f.Release.Name, ChangeRequest: cr.Name, ApprovalDigest: cr.Spec.ApprovalDigest, Decision: sluicev1.DecisionApprove,
			Approver: "k8s:alice", Source: sluicev1.SourceKubernetes},
	}
	require.NoError(f.T, f.Env.Client.Create(context.Background(), a))
	return a
}

// ApplyFirst makes, approves and applies the first change, and records
// the syncer's newest commit at its revision.
func (f *Fixture) ApplyFirst() *sluicev1.ChangeRequest {
	commit := appliertest.RandomSHA()
	cr := f.Change(commit, 1, Values)
	f.Approve(cr)
	got, err := f.Env.WaitChangePhase(context.Background(), client.ObjectKeyFromObject(cr), sluicev1.PhaseApplied, 2*time.Minute)
	require.NoError(f.T, err)
	f.SetSynced(commit)
	return got
}

// SetSynced records, as the syncer does, the newest commit of the release.
func (f *Fixture) SetSynced(commit string) {
	rel := &sluicev1.Release{}
	require.NoError(f.T, f.Env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.Release), rel))
	orig := rel.DeepCopy()
	rel.Status.LastSyncedCommit = commit
	require.NoError(f.T, f.Env.Client.Status().Patch(context.Background(), rel, client.MergeFrom(orig)))
}

// WaitDrifted waits for the Release's Drifted condition to have status
// want and returns the Release.
func (f *Fixture) WaitDrifted(want metav1.ConditionStatus) *sluicev1.Release {
	f.T.Helper()
	var rel *sluicev1.Release
	require.Eventually(f.T, func() bool {
		rel = &sluicev1.Release{}
		require.NoError(f.T, f.Env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.Release), rel))
		c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted)
		return c != nil && c.Status == want
	}, 90*time.Second, 200*time.Millisecond, "Drifted never became %s", want)
	return rel
}

// ScaleAsHPA sets the Deployment's replicas as the HorizontalPodAutoscaler
// does: through the scale subresource, as kube-controller-manager.
func (f *Fixture) ScaleAsHPA(replicas int32) {
	ctx := context.Background()
	dep := f.Deployment()
	scale := &autoscalingv1.Scale{Spec: autoscalingv1.ScaleSpec{Replicas: replicas}}
	require.NoError(f.T, f.Env.Client.SubResource("scale").Update(ctx, dep, client.WithSubResourceBody(scale), client.FieldOwner("kube-controller-manager")))
}

// EditImage does what `kubectl edit` does to the Deployment's image.
func (f *Fixture) EditImage() {
	dep := f.Deployment()
	orig := dep.DeepCopy()
	dep.Spec.Template.Spec.Containers[0].Image = TamperedImage
	require.NoError(f.T, f.Env.Client.Patch(context.Background(), dep, client.MergeFrom(orig), client.FieldOwner("kubectl-edit")))
}

// DeleteConfigMap deletes the chart's ConfigMap by hand.
func (f *Fixture) DeleteConfigMap() {
	require.NoError(f.T, f.Env.Client.Delete(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.Target, Name: f.Release.Name + "-config"}}))
}

// Deployment reads the chart's Deployment.
func (f *Fixture) Deployment() *appsv1.Deployment {
	dep := &appsv1.Deployment{}
	require.NoError(f.T, f.Env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.Target, Name: f.Release.Name}, dep))
	return dep
}
