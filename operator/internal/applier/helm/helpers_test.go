package helm

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync/atomic"
	"testing"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
)

var counter atomic.Int32

// fixture is one Repository with a control namespace, a target namespace
// and a ServiceAccount, and one Release of the "web" service.
type fixture struct {
	t        testing.TB
	ctl      string
	target   string
	repo     *sluicev1.Repository
	release  *sluicev1.Release
	chart    string // chart folder under testdata/charts
	applier  *Applier
	clients  *kubernetes.Clientset
	commitNo int
}

type fixtureOption func(*fixtureOptions)

type fixtureOptions struct{ noRBAC bool }

// withoutRBAC leaves the ServiceAccount without any Role in the target
// namespace.
func withoutRBAC() fixtureOption { return func(o *fixtureOptions) { o.noRBAC = true } }

func newFixture(t testing.TB, opts ...fixtureOption) *fixture {
	t.Helper()
	var o fixtureOptions
	for _, opt := range opts {
		opt(&o)
	}
	n := counter.Add(1)
	f := &fixture{
		t:      t,
		ctl:    fmt.Sprintf("ctl-%d", n),
		target: fmt.Sprintf("web-staging-%d", n),
		chart:  "web",
	}
	ctx := context.Background()
	c := env.Client
	for _, ns := range []string{f.ctl, f.target} {
		require.NoError(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	require.NoError(t, c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ctl}}))
	if !o.noRBAC {
		require.NoError(t, env.GrantRole(ctx, f.target, "deployer", types.NamespacedName{Namespace: f.ctl, Name: "deployer"},
			[]rbacv1.PolicyRule{{APIGroups: []string{"", "apps"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
			authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets"}))
	}
	f.repo = &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: f.ctl},
		Spec: sluicev1.RepositorySpec{
			URL: "https://git.example.com/infra.git", ServiceAccountName: "deployer",
			TargetNamespaces: []string{"web-*"},
		},
	}
	f.release = &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "web-staging", Namespace: f.ctl},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "web", Environment: "staging", SourcePath: "services/web",
			TargetNamespace: f.target, Chart: sluicev1.ChartSource{Path: "charts/web"},
			Values: []sluicev1.RelativePath{"values.yaml", "values-staging.yaml"}, Delivery: sluicev1.DeliveryHelm,
		},
	}
	f.applier = newApplier(t)
	cs, err := kubernetes.NewForConfig(env.Config)
	require.NoError(t, err)
	f.clients = cs
	return f
}

// deployer is the user name of the fixture's ServiceAccount.
func (f *fixture) deployer() string { return "system:serviceaccount:" + f.ctl + ":deployer" }

func newApplier(t testing.TB) *Applier {
	fetcher, err := artifact.NewFetcher(server.BaseURL())
	require.NoError(t, err)
	fetcher.TempDir = t.TempDir()
	a, err := New(Options{Config: env.Config, Fetcher: fetcher, Log: logr.Discard()})
	require.NoError(t, err)
	return a
}

// serviceYAML is the manifest of the "web" service for the fixture.
func (f *fixture) serviceYAML() string {
	return fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
owners: [team-web]
chart: {path: charts/%s}
values: [values.yaml]
environments:
  - name: staging
    namespace: %s
    values: [values-staging.yaml]
    delivery: helm
    approval: {required: 0, autoApproveRisk: low}
`, f.chart, f.target)
}

// tree is the content of an artifact: the chart from testdata, the service
// manifest and the two values files.
func (f *fixture) tree(stagingValues string) map[string][]byte {
	files := map[string][]byte{
		"services/web/service.yaml":          []byte(f.serviceYAML()),
		"services/web/values.yaml":           []byte("replicas: 1\n"),
		"services/web/values-staging.yaml":   []byte(stagingValues),
		"services/web/README.md":             []byte("The web service.\n"),
		"charts/" + f.chart + "/.helmignore": []byte("*.bak\n"),
	}
	root := filepath.Join("testdata", "charts", f.chart)
	require.NoError(f.t, filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		files[path.Join("charts", f.chart, filepath.ToSlash(rel))] = b
		return nil
	}))
	return files
}

// validatorDigest is the manifestDigest the validator records for the
// files: helmcheck.Render, offline (lookup finds nothing).
func validatorDigest(t testing.TB, files map[string][]byte, chartDir string, valueFiles []string, name, ns string) sluicev1.Digest {
	t.Helper()
	dir := t.TempDir()
	for n, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	var abs []string
	for _, v := range valueFiles {
		abs = append(abs, filepath.Join(dir, v))
	}
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{
		Chart: filepath.Join(dir, chartDir), ValuesFiles: abs, ReleaseName: name, Namespace: ns,
	})
	require.NoError(t, err)
	require.NotEmpty(t, res.ManifestDigest, "findings: %v", res.Findings)
	return sluicev1.Digest(res.ManifestDigest)
}

// changeOpts shape a change away from the honest default.
type changeOpts struct {
	// approvedValues, when set, is what the manifestDigest was computed
	// from, while the artifact carries the values passed to change.
	approvedValues *string
	// serve, when set, replaces the bytes served for the artifact.
	serve []byte
}

// change builds the ChangeRequest for a commit whose values-staging.yaml is
// stagingValues, serves its artifact, and records honest digests.
func (f *fixture) change(stagingValues string, o changeOpts) *sluicev1.ChangeRequest {
	f.t.Helper()
	f.commitNo++
	files := f.tree(stagingValues)
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	approvedFiles := files
	if o.approvedValues != nil {
		approvedFiles = f.tree(*o.approvedValues)
	}
	digest := validatorDigest(f.t, approvedFiles, "charts/"+f.chart,
		[]string{"services/web/values.yaml", "services/web/values-staging.yaml"}, f.release.Name, f.target)
	commit := appliertest.RandomSHA()
	served := gz
	if o.serve != nil {
		served = o.serve
	}
	url := server.Put(f.ctl+"/"+commit+".tar.gz", served)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, commit, 1), Namespace: f.ctl},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: commit, Attempt: 1, TargetNamespace: f.target, Delivery: sluicev1.DeliveryHelm,
			Source:         appliertest.SourceOf(f.release.Spec),
			Artifact:       sluicev1.ArtifactReference{URL: url, SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: digest,
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	return cr
}

func (f *fixture) request(cr *sluicev1.ChangeRequest) applier.Request {
	return applier.Request{Change: cr, Release: applier.ReleaseOf(f.release), Repository: f.repo}
}

// removal is what a cleanup removes: the fixture's release as applied to
// its target namespace (by the Delete change cr, nil for a finalizer).
func (f *fixture) removal(cr *sluicev1.ChangeRequest) applier.Removal {
	return applier.Removal{Release: applier.ReleaseOf(f.release), TargetNamespace: f.target, Change: cr}
}

func (f *fixture) apply(cr *sluicev1.ChangeRequest) (applier.Result, error) {
	return f.applier.Apply(context.Background(), f.request(cr))
}

// helmHistory reads the Helm release history with admin rights.
func (f *fixture) helmHistory() []*release.Release {
	f.t.Helper()
	store := storage.Init(driver.NewSecrets(f.clients.CoreV1().Secrets(f.target)))
	h, err := store.History(f.release.Name)
	if err != nil {
		require.ErrorIs(f.t, err, driver.ErrReleaseNotFound)
		return nil
	}
	sort.Slice(h, func(i, j int) bool { return h[i].Version < h[j].Version })
	return h
}

func (f *fixture) adminStore() *storage.Storage {
	return storage.Init(driver.NewSecrets(f.clients.CoreV1().Secrets(f.target)))
}

func (f *fixture) configMap() (*corev1.ConfigMap, error) {
	cm := &corev1.ConfigMap{}
	err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: f.release.Name + "-config"}, cm)
	return cm, err
}

// requireNothingInstalled checks the target namespace holds no Helm record
// and none of the chart's objects.
func (f *fixture) requireNothingInstalled() {
	f.t.Helper()
	require.Empty(f.t, f.helmHistory(), "no Helm release record")
	_, err := f.configMap()
	require.True(f.t, apierrors.IsNotFound(err), "no ConfigMap: %v", err)
	var deps appsv1.DeploymentList
	require.NoError(f.t, env.Client.List(context.Background(), &deps, client.InNamespace(f.target)))
	require.Empty(f.t, deps.Items, "no Deployment")
}

var server *artifacttest.Server

var env *testenv.Env
