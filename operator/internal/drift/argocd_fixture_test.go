package drift_test

// The Argo CD drift and audit tests' fixture: a real Argo CD (argocdtest:
// application controller, repo-server, cmp-server running the Sluice
// plugin, Redis) against this package's envtest API server, a real git
// repository Argo CD clones over file://, and the operator's gate, Argo CD
// applier and drift controller in a manager. The plugin is this test
// binary run as `argocd-cmp generate` (the operator's RunCMP), reading
// Releases and ChangeRequests as a get-only user and artifacts from the
// package's artifact server.

import (
	"context"
	"fmt"
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
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	argoapplier "github.com/sluice-gitops/sluice/operator/internal/applier/argocd"
	"github.com/sluice-gitops/sluice/operator/internal/applier/argocd/argocdtest"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
	"github.com/sluice-gitops/sluice/operator/internal/drift"
)

// cmpChild makes this test binary act as the Sluice plugin when the
// cmp-server runs it. It is checked in init, before TestMain starts a
// control plane.
const cmpChild = "SLUICE_DRIFT_TEST_AS_ARGOCD_CMP"

func init() {
	if os.Getenv(cmpChild) == "1" && len(os.Args) > 1 && os.Args[1] == argoapplier.CMPCommand {
		os.Exit(argoapplier.RunCMP(os.Args[2:], os.Stdout, os.Stderr))
	}
}

// startArgoCD runs Argo CD for the test and its subtests.
func startArgoCD(t *testing.T, env *testenv.Env, server *artifacttest.Server) *argocdtest.ArgoCD {
	t.Helper()
	ctx := context.Background()
	cfg, err := env.AddUser("sluice-drift-argocd-cmp")
	require.NoError(t, err)
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "sluice-drift-argocd-cmp"}, Rules: []rbacv1.PolicyRule{{
		APIGroups: []string{sluicev1.GroupVersion.Group}, Resources: []string{"releases", "changerequests"}, Verbs: []string{"get"},
	}}}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "sluice-drift-argocd-cmp"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "sluice-drift-argocd-cmp"}}}
	for _, o := range []client.Object{cr, crb} {
		require.NoError(t, env.Client.Create(ctx, o))
	}
	require.NoError(t, env.WaitAllowed(ctx, authorizationv1.SubjectAccessReviewSpec{User: "sluice-drift-argocd-cmp",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "get", Group: sluicev1.GroupVersion.Group, Resource: "changerequests"}}))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	require.NoError(t, testenv.WriteKubeconfig(cfg, kubeconfig, ""))
	self, err := os.Executable()
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	argo, err := argocdtest.Start(sctx, argocdtest.Options{Env: env, Plugin: &argocdtest.Plugin{
		Name:    argoapplier.PluginName,
		Command: []string{self, argoapplier.CMPCommand, "generate", "--kubeconfig", kubeconfig, "--artifact-base-url", server.BaseURL()},
		Env:     []string{cmpChild + "=1"},
	}, Plugins: []argocdtest.Plugin{argocdtest.OtherPlugin()}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = argo.Stop() })
	return argo
}

var argoCounter atomic.Int32

// argoFixture is one Repository (a real git repository, drift mode as
// given) with a control namespace, a target namespace, a ServiceAccount
// that may manage Applications in the control namespace, and the Release
// web-prod delivered by Argo CD (one approval required).
type argoFixture struct {
	t       *testing.T
	env     *testenv.Env
	server  *artifacttest.Server
	argo    *argocdtest.ArgoCD
	ctl     string
	target  string
	git     *argocdtest.GitRepo
	repo    *sluicev1.Repository
	release *sluicev1.Release
}

func newArgoFixture(t *testing.T, argo *argocdtest.ArgoCD, mode sluicev1.DriftMode) *argoFixture {
	t.Helper()
	env, server := drift.SharedEnv()
	ctx := context.Background()
	n := argoCounter.Add(1)
	f := &argoFixture{t: t, env: env, server: server, argo: argo,
		ctl: fmt.Sprintf("argo-drift-ctl-%d", n), target: fmt.Sprintf("web-argo-%d", n), git: argocdtest.NewGitRepo(t)}
	for _, ns := range []string{f.ctl, f.target} {
		require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	require.NoError(t, env.Client.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: f.ctl}}))
	require.NoError(t, env.GrantRole(ctx, f.ctl, "argocd-apps", types.NamespacedName{Namespace: f.ctl, Name: "deployer"},
		[]rbacv1.PolicyRule{{APIGroups: []string{"argoproj.io"}, Resources: []string{"applications"}, Verbs: []string{"*"}}},
		authorizationv1.ResourceAttributes{Verb: "create", Group: "argoproj.io", Resource: "applications"}))
	f.repo = &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: f.ctl},
		Spec: sluicev1.RepositorySpec{URL: f.git.URL, ServiceAccountName: "deployer", TargetNamespaces: []string{"web-*"},
			Drift: &sluicev1.DriftPolicy{Mode: mode, Interval: &metav1.Duration{Duration: 10 * time.Second}}},
	}
	require.NoError(t, env.Client.Create(ctx, f.repo))
	f.release = &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "web-prod", Namespace: f.ctl},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "web", Environment: "prod", SourcePath: "services/web",
			TargetNamespace: f.target, Chart: sluicev1.ChartSource{Path: "charts/web"},
			Values: []sluicev1.RelativePath{"services/web/values-prod.yaml"}, Delivery: sluicev1.DeliveryArgoCD,
			Rule: sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
	}
	require.NoError(t, env.Client.Create(ctx, f.release))
	return f
}

// start runs the operator's gate and Argo CD applier, and the drift
// controller, for the fixture's control namespace until the test ends.
func (f *argoFixture) start() {
	t := f.t
	scheme, err := controller.NewScheme()
	require.NoError(t, err)
	mgr, err := ctrl.NewManager(f.env.Config, ctrl.Options{
		Scheme:  scheme,
		Metrics: metricsserver.Options{BindAddress: "0"},
		Cache:   cache.Options{DefaultNamespaces: map[string]cache.Config{f.ctl: {}}},
		Logger:  logr.Discard(),
	})
	require.NoError(t, err)
	reg := applier.Registry{}
	require.NoError(t, (&argoapplier.Flags{Apply: true, Namespace: f.argo.Namespace, Server: argoapplier.InClusterServer, Wait: 30 * time.Second,
		ArtifactBaseURL: f.server.BaseURL()}).Register(reg, f.env.Config, logr.Discard()))
	require.NotNil(t, reg[sluicev1.DeliveryArgoCD])
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, controller.Setup(ctx, mgr, controller.Options{Appliers: reg, LockRetryInterval: time.Second, SkipNameValidation: true}))
	require.NoError(t, drift.Setup(mgr, drift.Options{Config: f.env.Config, ArgoCDServer: argoapplier.InClusterServer, SkipNameValidation: true}))
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// argoValues is the honest values file of the first change.
const argoValues = "message: approved\n"

// chartFiles is a chart of two ConfigMaps, which Argo CD reports Healthy
// at once (there is no kubelet).
var chartFiles = map[string]string{
	"charts/web/Chart.yaml": "apiVersion: v2\nname: web\nversion: 0.1.0\n",
	"charts/web/templates/configmaps.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-config
data:
  message: {{ .Values.message | quote }}
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-extra
data:
  owner: team-web
`,
}

// tree is the repository at a commit: the service folder, the chart and
// extra files.
func (f *argoFixture) tree(values string, extra map[string]string) map[string][]byte {
	files := map[string][]byte{
		"services/web/service.yaml": []byte(fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
owners: [team-web]
chart: {path: charts/web}
environments:
  - name: prod
    namespace: %s
    values: [values-prod.yaml]
    delivery: argocd
    approval: {required: 1, autoApproveRisk: none}
`, f.target)),
		"services/web/values-prod.yaml": []byte(values),
	}
	for n, c := range chartFiles {
		files[n] = []byte(c)
	}
	for n, c := range extra {
		files[n] = []byte(c)
	}
	return files
}

// push replaces the repository's tree with files, commits and returns the
// commit.
func (f *argoFixture) push(files map[string][]byte) string { return f.git.Commit(files) }

// manifestDigest is what the validator records for the files.
func (f *argoFixture) manifestDigest(files map[string][]byte) sluicev1.Digest {
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

// change records the ChangeRequest the syncer makes for files at commit
// (attempt n at that commit), with its artifact served.
func (f *argoFixture) change(commit string, attempt int32, files map[string][]byte) *sluicev1.ChangeRequest {
	f.t.Helper()
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	url := f.server.Put(fmt.Sprintf("%s/%s-%d.tar.gz", f.ctl, commit, attempt), gz)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, commit, attempt), Namespace: f.ctl,
			Labels: map[string]string{sluicev1.LabelRelease: f.release.Name},
			// The syncer makes the Release the change's controller.
			OwnerReferences: []metav1.OwnerReference{{APIVersion: sluicev1.GroupVersion.String(), Kind: "Release",
				Name: f.release.Name, UID: f.release.UID, Controller: ptr.To(true)}}},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: commit, Attempt: attempt, TargetNamespace: f.target, Delivery: sluicev1.DeliveryArgoCD,
			Source: &sluicev1.ChangeSource{Service: "web", Environment: "prod", Path: "services/web",
				Chart: sluicev1.ChartSource{Path: "charts/web"}, Values: []sluicev1.RelativePath{"values-prod.yaml"}},
			Artifact:       sluicev1.ArtifactReference{URL: url, SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: f.manifestDigest(files),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			Rule:           sluicev1.ApprovalRule{Required: 1, AutoApproveRisk: sluicev1.AutoApproveNone},
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	require.NoError(f.t, f.env.Client.Create(context.Background(), cr))
	return cr
}

// applyFirst pushes the first commit, records its change, has alice
// approve it, waits until Argo CD delivered it, and records the syncer's
// newest commit at its revision. It returns the applied change and the
// files of its commit.
func (f *argoFixture) applyFirst() (*sluicev1.ChangeRequest, map[string][]byte) {
	f.t.Helper()
	files := f.tree(argoValues, nil)
	commit := f.push(files)
	cr := f.change(commit, 1, files)
	require.NoError(f.t, f.env.Client.Create(context.Background(), &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: cr.Name + "-", Namespace: f.ctl},
		Spec: sluicev1.ApprovalSpec{Release: f.release.Name, ChangeRequest: cr.Name, ApprovalDigest: cr.Spec.ApprovalDigest, Decision: sluicev1.DecisionApprove,
			Approver: "k8s:alice", Source: sluicev1.SourceKubernetes},
	}))
	got, err := f.env.WaitChangePhase(context.Background(), client.ObjectKeyFromObject(cr), sluicev1.PhaseApplied, 3*time.Minute)
	require.NoError(f.t, err, f.argo.Logs())
	rel := &sluicev1.Release{}
	require.NoError(f.t, f.env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), rel))
	orig := rel.DeepCopy()
	rel.Status.LastSyncedCommit = commit
	require.NoError(f.t, f.env.Client.Status().Patch(context.Background(), rel, client.MergeFrom(orig)))
	return got, files
}

// recordApplied records cr as the gate and the Argo CD applier would have:
// alice's approval, the change Applied under its rule, the Release's
// applied status.
func (f *argoFixture) recordApplied(cr *sluicev1.ChangeRequest) {
	f.t.Helper()
	ctx := context.Background()
	require.NoError(f.t, f.env.Client.Create(ctx, &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: cr.Name + "-", Namespace: f.ctl},
		Spec: sluicev1.ApprovalSpec{Release: f.release.Name, ChangeRequest: cr.Name, ApprovalDigest: cr.Spec.ApprovalDigest, Decision: sluicev1.DecisionApprove,
			Approver: "k8s:alice", Source: sluicev1.SourceKubernetes},
	}))
	now := metav1.Now()
	cr.Status.Phase, cr.Status.EffectiveRule, cr.Status.ApprovedAt = sluicev1.PhaseApplied, cr.Spec.Rule.DeepCopy(), &now
	require.NoError(f.t, f.env.Client.Status().Update(ctx, cr))
	rel := &sluicev1.Release{}
	require.NoError(f.t, f.env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel))
	rel.Status.AppliedChange, rel.Status.AppliedRevision, rel.Status.AppliedDigest = cr.Name, cr.Spec.Revision, cr.Spec.ApprovalDigest
	require.NoError(f.t, f.env.Client.Status().Update(ctx, rel))
	f.release = rel
}

// applicationAt creates the Repository's AppProject and the Application
// as the Argo CD applier sets them for cr, with a sync of its commit.
func (f *argoFixture) applicationAt(cr *sluicev1.ChangeRequest) {
	f.t.Helper()
	ctx := context.Background()
	proj := &unstructured.Unstructured{}
	proj.SetGroupVersionKind(argoapplier.AppProjectGVK)
	proj.SetNamespace(f.argo.Namespace)
	proj.SetName(argoapplier.ProjectName(f.repo))
	proj.Object["spec"] = map[string]any{"sourceRepos": []any{f.repo.Spec.URL}, "sourceNamespaces": []any{f.ctl},
		"destinations": []any{map[string]any{"server": argoapplier.InClusterServer, "namespace": f.target}}}
	require.NoError(f.t, f.env.Client.Create(ctx, proj))
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argoapplier.ApplicationGVK)
	app.SetNamespace(f.ctl)
	app.SetName(f.release.Name)
	app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: sluicev1.GroupVersion.String(), Kind: "Release", Name: f.release.Name,
		UID: f.release.UID, Controller: ptr.To(true)}})
	app.Object["spec"] = map[string]any{
		"project": argoapplier.ProjectName(f.repo),
		"source": map[string]any{"repoURL": f.repo.Spec.URL, "targetRevision": cr.Spec.Revision, "path": "services/web",
			"plugin": map[string]any{"name": argoapplier.PluginName}},
		"destination": map[string]any{"server": argoapplier.InClusterServer, "namespace": f.target},
	}
	app.Object["operation"] = map[string]any{"initiatedBy": map[string]any{"username": "sluice:" + f.ctl + "/" + cr.Name},
		"sync": map[string]any{"revision": cr.Spec.Revision}}
	require.NoError(f.t, f.env.Client.Create(ctx, app))
}

// waitDrifted waits for the Release's Drifted condition to have status
// want (and, when given, reason) and returns the Release.
func (f *argoFixture) waitDrifted(want metav1.ConditionStatus, reason string) *sluicev1.Release {
	f.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rel := &sluicev1.Release{}
		require.NoError(f.t, f.env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), rel))
		c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted)
		if c != nil && c.Status == want && (reason == "" || c.Reason == reason) {
			return rel
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("Drifted never became %s %s: %+v\n%s", want, reason, c, f.argo.Logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// configMap reads a ConfigMap of the target namespace; nil when there is
// none.
func (f *argoFixture) configMap(name string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	if err := f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: name}, cm); err != nil {
		require.True(f.t, client.IgnoreNotFound(err) == nil, err)
		return nil
	}
	return cm
}

// tamper does what a person with kubectl would: edit the message of the
// config ConfigMap and delete the extra one, both managed by Argo CD.
func (f *argoFixture) tamper() {
	f.t.Helper()
	ctx := context.Background()
	cm := f.configMap(f.release.Name + "-config")
	orig := cm.DeepCopy()
	cm.Data["message"] = "tampered"
	require.NoError(f.t, f.env.Client.Patch(ctx, cm, client.MergeFrom(orig), client.FieldOwner("kubectl-edit")))
	require.NoError(f.t, f.env.Client.Delete(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.target, Name: f.release.Name + "-extra"}}))
}

// application reads the release's Argo CD Application.
func (f *argoFixture) application() *unstructured.Unstructured {
	f.t.Helper()
	app := &unstructured.Unstructured{}
	app.SetGroupVersionKind(argoapplier.ApplicationGVK)
	require.NoError(f.t, f.env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, app))
	return app
}

// metric is the value of a sluice_* series in the operator's registry.
func metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
	next:
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}
