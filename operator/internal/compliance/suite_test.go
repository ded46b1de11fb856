package compliance_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/compliance"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// suite starts the control plane at the first envtest test, so the
// benchmarks over in-memory objects pay nothing for it.
var suite = &testenv.Suite{Lazy: true}

func TestMain(m *testing.M) {
	// The managers' own logs; the scanners log to their test.
	ctrl.SetLogger(logr.Discard())
	suite.Main(m)
}

var seq atomic.Int32

// fixture is one test's own control namespace, Repository (whose target
// namespaces are prefix + "*") and operator manager running a Scanner.
type fixture struct {
	t       *testing.T
	env     *testenv.Env
	ctl     string
	prefix  string
	reports client.Client // reads Reports
	scanner *compliance.Scanner
	metrics *prometheus.Registry
	// writes counts the Report creates, updates, patches and deletes the
	// scanner sent to the API server.
	writes atomic.Int64
}

// newFixture starts a Scanner with o (Interval, Timeout, Engine...) on a
// manager whose cache sees only the fixture's control namespace.
func newFixture(t *testing.T, o compliance.Options) *fixture {
	t.Helper()
	env := suite.Env(t)
	ctx := t.Context()
	n := seq.Add(1)
	f := &fixture{t: t, env: env, ctl: fmt.Sprintf("ctl%d", n), prefix: fmt.Sprintf("t%d-", n)}
	f.namespace(f.ctl)
	require.NoError(t, env.Client.Create(ctx, &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: f.ctl},
		Spec: sluicev1.RepositorySpec{
			URL: "https://git.invalid/infra.git", ServiceAccountName: "deployer", TargetNamespaces: []string{f.prefix + "*"},
		},
	}))
	rc, err := compliance.ReportClient(env.Config)
	require.NoError(t, err)
	f.reports = rc
	count := func() { f.writes.Add(1) }
	o.Client = interceptor.NewClient(rc, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, obj, opts...)
		},
	})
	f.metrics = prometheus.NewRegistry()
	o.Metrics = metrics.NewCompliance()
	require.NoError(t, o.Metrics.Register(f.metrics))
	o.Log = testr.New(t)
	if o.Debounce == 0 {
		o.Debounce = 50 * time.Millisecond
	}
	skip := true
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:                 env.Scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  cache.Options{DefaultNamespaces: map[string]cache.Config{f.ctl: {}}},
		Controller:             config.Controller{SkipNameValidation: &skip},
	})
	require.NoError(t, err)
	s, err := compliance.New(ctx, mgr, env.Config, o)
	require.NoError(t, err)
	require.NoError(t, mgr.Add(s))
	f.scanner = s
	testenv.Go(t, mgr).FailOnError(t)
	return f
}

// namespace creates a namespace.
func (f *fixture) namespace(name string) string {
	f.t.Helper()
	err := f.env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
	if !apierrors.IsAlreadyExists(err) {
		require.NoError(f.t, err)
	}
	return name
}

// target creates a target namespace of the fixture's Repository.
func (f *fixture) target(suffix string) string { return f.namespace(f.prefix + suffix) }

// report waits until the Report of ns satisfies cond and returns it.
func (f *fixture) report(ns string, cond func(*openreports.Report) bool, what string) *openreports.Report {
	f.t.Helper()
	var got *openreports.Report
	require.Eventually(f.t, func() bool {
		r := &openreports.Report{}
		if err := f.reports.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: compliance.ReportName}, r); err != nil {
			return false
		}
		got = r
		return cond(r)
	}, 2*time.Minute, 50*time.Millisecond, "the Report of %s never showed %s; last seen: %s", ns, what, describe(got))
	return got
}

func describe(r *openreports.Report) string {
	if r == nil {
		return "no Report"
	}
	s := fmt.Sprintf("summary %+v, %d results:", r.Summary, len(r.Results))
	for i, res := range r.Results {
		if i == 20 {
			s += " …"
			break
		}
		s += fmt.Sprintf("\n  %s %s/%s %v: %s %v", res.Result, res.Policy, res.Rule, subjects(res), res.Description, res.Properties)
	}
	return s
}

func subjects(r openreports.ReportResult) []string {
	var out []string
	for _, s := range r.Subjects {
		out = append(out, s.Kind+"/"+s.Name)
	}
	return out
}

// results are the results about kind/name from policy ("" any).
func results(r *openreports.Report, kind, name, policy string) []openreports.ReportResult {
	var out []openreports.ReportResult
	for _, res := range r.Results {
		if len(res.Subjects) == 0 || res.Subjects[0].Kind != kind || res.Subjects[0].Name != name {
			continue
		}
		if policy != "" && res.Policy+"/"+res.Rule != policy {
			continue
		}
		out = append(out, res)
	}
	return out
}

// deployment is a Deployment of one container running image.
func deployment(ns, name, image string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}}},
			},
		},
	}
}

// helmManaged marks obj as Helm's install of release (what the Helm
// applier's installs carry).
func helmManaged(obj client.Object, release, ns string) {
	a := obj.GetAnnotations()
	if a == nil {
		a = map[string]string{}
	}
	a["meta.helm.sh/release-name"] = release
	a["meta.helm.sh/release-namespace"] = ns
	obj.SetAnnotations(a)
	l := obj.GetLabels()
	if l == nil {
		l = map[string]string{}
	}
	l["app.kubernetes.io/managed-by"] = "Helm"
	obj.SetLabels(l)
}

// appliedRelease records, as the syncer and operator would, a Release in
// the control namespace whose change (approved by approvers, delivered
// by delivery) was applied to target.
func (f *fixture) appliedRelease(name, target string, delivery sluicev1.Delivery, approvers ...sluicev1.Identity) (release, change string) {
	f.t.Helper()
	ctx := context.Background()
	c := f.env.Client
	rel := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ctl},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "web", Environment: "prod", SourcePath: "services/web",
			TargetNamespace: target, Chart: sluicev1.ChartSource{Path: "charts/service"}, Delivery: delivery,
		},
	}
	require.NoError(f.t, c.Create(ctx, rel))
	revision := fmt.Sprintf("%040x", seq.Add(1))
	content := sluicev1.SHA256Digest([]byte("content " + name))
	manifest := sluicev1.SHA256Digest([]byte("manifest " + name))
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name: sluicev1.ChangeRequestName(name, revision, 1), Namespace: f.ctl,
			Labels: map[string]string{sluicev1.LabelRelease: name},
		},
		Spec: sluicev1.ChangeRequestSpec{
			Release: name, Revision: revision, TargetNamespace: target, Delivery: delivery,
			Artifact:      sluicev1.ArtifactReference{URL: "http://artifacts.invalid/" + name + ".tar.gz", SHA256: sluicev1.SHA256Digest([]byte("tgz"))},
			ContentDigest: content, ManifestDigest: manifest,
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			ApprovalDigest: sluicev1.ComputeApprovalDigest(f.ctl, name, content, manifest, ""),
		},
	}
	require.NoError(f.t, c.Create(ctx, cr))
	cr.Status.Phase = sluicev1.PhaseApplied
	cr.Status.ApprovedBy = approvers
	require.NoError(f.t, c.Status().Update(ctx, cr))
	rel.Status.AppliedChange = cr.Name
	rel.Status.AppliedRevision = revision
	rel.Status.AppliedTargetNamespace = target
	require.NoError(f.t, c.Status().Update(ctx, rel))
	return f.ctl + "/" + name, f.ctl + "/" + cr.Name
}
