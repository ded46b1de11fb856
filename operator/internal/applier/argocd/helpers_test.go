package argocd

// The tests run a real Argo CD (argocdtest: application controller,
// repo-server, cmp-server, Redis) against a real API server (testenv), one
// set for the package. Argo CD checks out a real git repository
// (file://) and renders through the Sluice plugin, which is this test
// binary run as `argocd-cmp generate` (the same RunCMP the operator binary
// runs), reading Releases and ChangeRequests as a read-only user and
// artifacts from a real HTTP artifact server.

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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/argocd/argocdtest"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

var (
	env     *testenv.Env
	argo    *argocdtest.ArgoCD
	server  *artifacttest.Server
	counter atomic.Int32
)

// cmpChild makes this test binary act as the Sluice plugin when the
// cmp-server runs it.
const cmpChild = "SLUICE_TEST_AS_ARGOCD_CMP"

func TestMain(m *testing.M) {
	if os.Getenv(cmpChild) == "1" && len(os.Args) > 1 && os.Args[1] == CMPCommand {
		os.Exit(RunCMP(os.Args[2:], os.Stdout, os.Stderr))
	}
	crds, err := argocdtest.CRDPaths()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: crds}, setup)
}

// setup starts the artifact server and a real Argo CD whose repo-server
// runs this test binary as the Sluice plugin.
func setup(e *testenv.Env) error {
	env = e
	server = artifacttest.NewServer()
	e.Cleanup(server.Close)
	dir, err := os.MkdirTemp("", "sluice-cmp-")
	if err != nil {
		return err
	}
	e.Cleanup(func() { _ = os.RemoveAll(dir) })
	kubeconfig, err := cmpKubeconfig(dir)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	argo, err = argocdtest.Start(ctx, argocdtest.Options{Env: env, Plugin: &argocdtest.Plugin{
		Name:    PluginName,
		Command: []string{self, CMPCommand, "generate", "--kubeconfig", kubeconfig, "--artifact-base-url", server.BaseURL()},
		Env:     []string{cmpChild + "=1"},
	}, Plugins: []argocdtest.Plugin{argocdtest.OtherPlugin()}})
	if err != nil {
		return err
	}
	e.Cleanup(func() { _ = argo.Stop() })
	return nil
}

// cmpKubeconfig writes the kubeconfig of the plugin's identity, which may
// only get Releases and ChangeRequests.
func cmpKubeconfig(dir string) (string, error) {
	ctx := context.Background()
	cfg, err := env.AddUser("sluice-argocd-cmp")
	if err != nil {
		return "", err
	}
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sluice-argocd-cmp"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"releases", "changerequests"}, Verbs: []string{"get"},
	}}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sluice-argocd-cmp"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "sluice-argocd-cmp"}}}
	for _, o := range []client.Object{cr, crb} {
		if err := env.Client.Create(ctx, o); err != nil {
			return "", err
		}
	}
	if err := env.WaitAllowed(ctx, authorizationv1.SubjectAccessReviewSpec{User: "sluice-argocd-cmp",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Group: sluicev1.GroupVersion.Group, Resource: "changerequests"}}); err != nil {
		return "", err
	}
	p := filepath.Join(dir, "kubeconfig")
	return p, testenv.WriteKubeconfig(cfg, p, "")
}

// fixture is one Repository (a real git repository) with a control
// namespace, a target namespace, a ServiceAccount allowed to manage
// Applications in the control namespace, and the Release web-prod.
type fixture struct {
	t       *testing.T
	ctl     string
	target  string
	git     *argocdtest.GitRepo
	repo    *sluicev1.Repository
	release *sluicev1.Release
	applier *Applier
	// sourcePath is the service folder the next recorded change names.
	sourcePath sluicev1.RelativePath
}

func newFixture(t *testing.T, rbac bool) *fixture {
	t.Helper()
	ctx := context.Background()
	n := counter.Add(1)
	f := &fixture{t: t, ctl: fmt.Sprintf("argo-ctl-%d", n), target: fmt.Sprintf("web-prod-%d", n), git: argocdtest.NewGitRepo(t),
		sourcePath: "services/web"}
	for _, ns := range []string{f.ctl, f.target} {
		require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ctl}}))
	if rbac {
		require.NoError(t, env.GrantRole(ctx, f.ctl, "argocd-apps", types.NamespacedName{Namespace: f.ctl, Name: "deployer"},
			[]rbacv1.PolicyRule{{APIGroups: []string{"argoproj.io"}, Resources: []string{"applications"}, Verbs: []string{"*"}}},
			authorizationv1.ResourceAttributes{Verb: "create", Group: "argoproj.io", Resource: "applications"}))
	}
	f.repo = &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: f.ctl},
		Spec: sluicev1.RepositorySpec{URL: f.git.URL, ServiceAccountName: "deployer",
			TargetNamespaces: []string{"web-*"}},
	}
	rel := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "web-prod", Namespace: f.ctl},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "web", Environment: "prod", SourcePath: "services/web",
			TargetNamespace: f.target, Chart: sluicev1.ChartSource{Path: "charts/web"},
			Values: []sluicev1.RelativePath{"services/web/values-prod.yaml"}, Delivery: sluicev1.DeliveryArgoCD,
		},
	}
	require.NoError(t, env.Client.Create(ctx, rel))
	f.release = rel
	fetcher, err := artifact.NewFetcher(server.BaseURL())
	require.NoError(t, err)
	fetcher.TempDir = t.TempDir()
	f.applier, err = New(Options{Config: env.Config, Fetcher: fetcher, Wait: 90 * time.Second, Log: logr.Discard()})
	require.NoError(t, err)
	return f
}

// serviceYAML is the service manifest of web, delivered by Argo CD.
func (f *fixture) serviceYAML() string {
	return fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
owners: [team-web]
chart: {path: charts/web}
environments:
  - name: prod
    namespace: %s
    values: [values-prod.yaml]
    delivery: argocd
    approval: {required: 0, autoApproveRisk: low}
`, f.target)
}

// tree is the repository at a commit: the service folder (manifest,
// values, and extra files) and the chart from testdata.
func (f *fixture) tree(values string, extra map[string]string) map[string][]byte {
	files := map[string][]byte{
		"services/web/service.yaml":     []byte(f.serviceYAML()),
		"services/web/values-prod.yaml": []byte(values),
	}
	for n, c := range extra {
		files[n] = []byte(c)
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
		files[path.Join("charts", "web", filepath.ToSlash(rel))] = b
		return nil
	}))
	return files
}

// digestOf is the manifestDigest the validator records for files.
func (f *fixture) digestOf(files map[string][]byte) sluicev1.Digest {
	f.t.Helper()
	dir := f.t.TempDir()
	for n, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.t, os.WriteFile(p, b, 0o644))
	}
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{
		Chart: filepath.Join(dir, "charts", "web"), ValuesFiles: []string{filepath.Join(dir, "services", "web", "values-prod.yaml")},
		ReleaseName: f.release.Name, Namespace: f.target,
	})
	require.NoError(f.t, err)
	require.NotEmpty(f.t, res.ManifestDigest, "findings: %v", res.Findings)
	return sluicev1.Digest(res.ManifestDigest)
}

// push commits the tree to the repository and returns the commit.
func (f *fixture) push(values string, extra map[string]string) (string, map[string][]byte) {
	files := f.tree(values, extra)
	return f.git.Commit(files), files
}

// change pushes a commit with values and extra files and records its
// ChangeRequest as the syncer does: artifact served, honest digests.
func (f *fixture) change(values string, extra map[string]string) *sluicev1.ChangeRequest {
	f.t.Helper()
	commit, files := f.push(values, extra)
	return f.changeFor(commit, files, f.digestOf(files))
}

// changeFor records the change of commit whose tree is files, as the
// syncer does; each edit is applied to it before it is created (and its
// approvalDigest computed).
func (f *fixture) changeFor(commit string, files map[string][]byte, digest sluicev1.Digest, edits ...func(*sluicev1.ChangeRequest)) *sluicev1.ChangeRequest {
	f.t.Helper()
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	url := server.Put(f.ctl+"/"+commit+".tar.gz", gz)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, commit, 1), Namespace: f.ctl,
			Labels: map[string]string{sluicev1.LabelRelease: f.release.Name},
			// The syncer makes the Release the change's controller.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: sluicev1.GroupVersion.String(), Kind: "Release",
				Name: f.release.Name, UID: f.release.UID, Controller: ptr.To(true)}}},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: commit, Attempt: 1, TargetNamespace: f.target, Delivery: sluicev1.DeliveryArgoCD,
			Source: &sluicev1.ChangeSource{Service: "web", Environment: "prod", Path: f.sourcePath,
				Chart: sluicev1.ChartSource{Path: "charts/web"}, Values: []sluicev1.RelativePath{"values-prod.yaml"}},
			Artifact:       sluicev1.ArtifactReference{URL: url, SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: digest,
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			Rule:           sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow},
		},
	}
	for _, edit := range edits {
		edit(cr)
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	require.NoError(f.t, env.Client.Create(context.Background(), cr))
	return cr
}

// take records what the operator records when it hands the change to the
// applier: the change is Applying and holds the Release's apply lock.
func (f *fixture) take(cr *sluicev1.ChangeRequest) {
	f.t.Helper()
	ctx := context.Background()
	cr.Status.Phase = sluicev1.PhaseApplying
	require.NoError(f.t, env.Client.Status().Update(ctx, cr))
	f.setReleaseStatus(func(s *sluicev1.ReleaseStatus) { s.CurrentChange = cr.Name })
}

// finish records a successful apply: Applied, lock released.
func (f *fixture) finish(cr *sluicev1.ChangeRequest) {
	f.t.Helper()
	cr.Status.Phase = sluicev1.PhaseApplied
	require.NoError(f.t, env.Client.Status().Update(context.Background(), cr))
	f.setReleaseStatus(func(s *sluicev1.ReleaseStatus) {
		s.CurrentChange, s.AppliedChange, s.AppliedRevision = "", cr.Name, cr.Spec.Revision
	})
}

func (f *fixture) setReleaseStatus(mutate func(*sluicev1.ReleaseStatus)) {
	f.t.Helper()
	rel := &sluicev1.Release{}
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), rel))
	mutate(&rel.Status)
	require.NoError(f.t, env.Client.Status().Update(context.Background(), rel))
	f.release = rel
}

// apply takes the change and applies it; a success is recorded.
// patience is how long a test waits for Argo CD to get somewhere: long,
// because on a busy machine its controller may take a while to look, and
// only a failing test waits it out.
const patience = 3 * time.Minute

// look calls Apply with req as the operator does, which retries an Apply
// that lost a write race: Argo CD writes the Application's status while
// the applier updates its spec, and on a busy machine the two meet.
func (f *fixture) look(req applier.Request) (applier.Result, error) {
	var res applier.Result
	err := retry.OnError(retry.DefaultRetry, apierrors.IsConflict, func() (err error) {
		res, err = f.applier.Apply(context.Background(), req)
		return err
	})
	return res, err
}

// apply takes the lock for cr, looks once (see look) and, when that
// succeeded, records the change Applied and frees the lock.
func (f *fixture) apply(cr *sluicev1.ChangeRequest) (applier.Result, error) {
	f.take(cr)
	res, err := f.look(applier.Request{Change: cr, Repository: f.repo})
	if err == nil {
		f.finish(cr)
	}
	return res, err
}

func (f *fixture) application() *unstructured.Unstructured {
	f.t.Helper()
	app := newApplication()
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, app))
	return app
}

// planted reports whether the other plugin's own object is in the target
// namespace.
func (f *fixture) planted() bool {
	return env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: "planted-by-other"}, &corev1.ConfigMap{}) == nil
}

// message is the data of the chart's ConfigMap in the target namespace
// ("" when there is none).
func (f *fixture) message() string {
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: f.release.Name + "-config"}, cm); err != nil {
		return ""
	}
	return cm.Data["message"]
}

// startOperator runs the operator's manager for the fixture's control
// namespace until the test ends, with this applier registered as
// cmd/operator registers it (wrapped by wrap, when set).
func (f *fixture) startOperator(wait time.Duration, wrap func(applier.Applier) applier.Applier) context.Context {
	f.t.Helper()
	reg := applier.Registry{}
	require.NoError(f.t, (&Flags{Apply: true, Namespace: argo.Namespace, Server: InClusterServer, Wait: wait,
		ArtifactBaseURL: server.BaseURL()}).Register(reg, env.Config, logr.Discard()))
	if wrap != nil {
		reg[sluicev1.DeliveryArgoCD] = wrap(reg[sluicev1.DeliveryArgoCD])
	}
	mgr, err := controller.NewManager(context.Background(), env.Config, controller.ManagerOptions{
		Options:     controller.Options{Appliers: reg, LockRetryInterval: time.Second, SkipNameValidation: true},
		MetricsAddr: "0", ProbeAddr: "0", PprofAddr: "0",
		Namespaces: []string{f.ctl},
	})
	require.NoError(f.t, err)
	run := testenv.Go(f.t, mgr)
	f.t.Cleanup(func() { require.NoError(f.t, run.Stop()) })
	return run.Context
}

// autoApprove creates the Repository and makes the Release approve
// low-risk changes by itself, as the syncer writes them.
func (f *fixture) autoApprove(ctx context.Context) {
	f.t.Helper()
	require.NoError(f.t, env.Client.Create(ctx, f.repo.DeepCopy()))
	rel := &sluicev1.Release{}
	require.NoError(f.t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel))
	rel.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	require.NoError(f.t, env.Client.Update(ctx, rel))
}
