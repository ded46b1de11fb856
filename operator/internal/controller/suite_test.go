package controller

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	"github.com/sluice-gitops/sluice/operator/internal/eventrec"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
	"github.com/sluice-gitops/sluice/operator/internal/verify"
)

// env is the one control plane of this package's tests.
var env *testenv.Env

// spans records every span the operator ends in this test binary.
var spans = tracetest.NewInMemoryExporter()

func TestMain(m *testing.M) {
	// As tracing.Setup installs it, with the spans kept in memory.
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)))
	var logOut io.Writer = io.Discard
	if os.Getenv("SLUICE_TEST_LOGS") != "" {
		logOut = os.Stderr
	}
	ctrl.SetLogger(zap.New(zap.WriteTo(logOut), zap.UseDevMode(true), zap.ConsoleEncoder(func(c *zapcore.EncoderConfig) { c.EncodeTime = zapcore.ISO8601TimeEncoder })))
	testenv.Main(m, testenv.Options{}, func(e *testenv.Env) error { env = e; return nil })
}

// writeCounter wraps a client and counts (and optionally fails) its writes.
type writeCounter struct {
	client.Client
	writes atomic.Int64
	// failStatus, when it returns an error, replaces a status write.
	failStatus func(obj client.Object) error
	// failDelete, when it returns an error, replaces a delete.
	failDelete func(obj client.Object) error
}

func (w *writeCounter) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	w.writes.Add(1)
	return w.Client.Create(ctx, obj, opts...)
}

func (w *writeCounter) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	w.writes.Add(1)
	return w.Client.Update(ctx, obj, opts...)
}

func (w *writeCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	w.writes.Add(1)
	return w.Client.Patch(ctx, obj, patch, opts...)
}

func (w *writeCounter) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	w.writes.Add(1)
	if w.failDelete != nil {
		if err := w.failDelete(obj); err != nil {
			return err
		}
	}
	return w.Client.Delete(ctx, obj, opts...)
}

func (w *writeCounter) DeleteAllOf(ctx context.Context, obj client.Object, opts ...client.DeleteAllOfOption) error {
	w.writes.Add(1)
	return w.Client.DeleteAllOf(ctx, obj, opts...)
}

func (w *writeCounter) Status() client.SubResourceWriter {
	return &statusCounter{SubResourceWriter: w.Client.Status(), w: w}
}

type statusCounter struct {
	client.SubResourceWriter
	w *writeCounter
}

func (s *statusCounter) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	s.w.writes.Add(1)
	if s.w.failStatus != nil {
		if err := s.w.failStatus(obj); err != nil {
			return err
		}
	}
	return s.SubResourceWriter.Update(ctx, obj, opts...)
}

func (s *statusCounter) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	s.w.writes.Add(1)
	if s.w.failStatus != nil {
		if err := s.w.failStatus(obj); err != nil {
			return err
		}
	}
	return s.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// operator is one running manager with both reconcilers, scoped to a
// namespace.
type operator struct {
	mgr    ctrl.Manager
	client *writeCounter
	// releaseClient counts the Release reconciler's writes (they are
	// counted in client too).
	releaseClient *writeCounter
	changes       *ChangeRequestReconciler
	release       *ReleaseReconciler
	run           *testenv.Running
}

type operatorConfig struct {
	applier       applier.Applier
	beforeHandOff func(ctx context.Context, cr *sluicev1.ChangeRequest)
	failStatus    func(obj client.Object) error
	failDelete    func(obj client.Object) error
	keep          int
	grace         time.Duration
	lockRetry     time.Duration
	concurrency   int
	// idle builds the reconcilers but registers no controller, so nothing
	// reconciles unless the test calls Reconcile: a test that counts the
	// writes of its own calls is alone with the API server.
	idle bool
	// measurer takes the verifications' measurements (nil: Prometheus).
	measurer verify.Measurer
}

// startOperator runs a manager for namespace ns until the test ends (or
// stop is called).
func startOperator(t testing.TB, ns string, cfg operatorConfig) *operator {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme: env.Scheme,
		Cache: cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}, DefaultTransform: cache.TransformStripManagedFields(),
			ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: PodCache()}},
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	require.NoError(t, err)
	require.NoError(t, IndexFields(context.Background(), mgr))
	wc := &writeCounter{Client: mgr.GetClient(), failStatus: cfg.failStatus, failDelete: cfg.failDelete}
	reg := applier.Registry{}
	if cfg.applier != nil {
		reg[sluicev1.DeliveryHelm] = cfg.applier
	}
	rec := metrics.New(mgr.GetCache())
	events, err := eventrec.ForManager(mgr)
	require.NoError(t, err)
	relWC := &writeCounter{Client: wc}
	op := &operator{
		mgr:           mgr,
		client:        wc,
		releaseClient: relWC,
		changes: &ChangeRequestReconciler{
			Client: wc, APIReader: mgr.GetAPIReader(), Recorder: events.GetEventRecorder("sluice-changerequest"),
			Appliers: reg, Metrics: rec, BeforeHandOff: cfg.beforeHandOff, LockRetryInterval: cfg.lockRetry,
			Measurer: cfg.measurer,
		},
		release: &ReleaseReconciler{
			Client: relWC, APIReader: mgr.GetAPIReader(), Recorder: events.GetEventRecorder("sluice-release"),
			Appliers: reg, KeepChangeRequests: cfg.keep, ApprovalGracePeriod: cfg.grace,
		},
	}
	if !cfg.idle {
		copts := controller.Options{MaxConcurrentReconciles: max(cfg.concurrency, 2), SkipNameValidation: ptr.To(true)}
		require.NoError(t, op.changes.SetupWithManager(mgr, copts))
		require.NoError(t, op.release.SetupWithManager(mgr, copts))
	}
	op.run = testenv.Go(t, mgr)
	if cfg.idle {
		// With no controller nothing else waits for the cache: reads
		// before it has started would fail.
		require.True(t, mgr.GetCache().WaitForCacheSync(ctx(t)), "the cache of the idle operator synced")
	}
	return op
}

// stop cancels the manager and waits until it has stopped.
func (o *operator) stop() { _ = o.run.Stop() }

// fixture is one test's namespace with a Repository.
type fixture struct {
	t  testing.TB
	ns string
	c  client.Client
	// op is the operator of the fixture when one test helper needs it.
	op *operator
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ns := "t-" + rand.String(8)
	c := env.Client
	require.NoError(t, c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	require.NoError(t, c.Create(ctx(t), &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ns},
		Spec: sluicev1.RepositorySpec{
			URL:                "https://git.example.com/platform/infra.git",
			TargetNamespaces:   []string{"checkout-*"},
			ServiceAccountName: "deployer",
		},
	}))
	return &fixture{t: t, ns: ns, c: c}
}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return c
}

func ids(s ...string) []sluicev1.Identity {
	out := make([]sluicev1.Identity, len(s))
	for i, x := range s {
		out[i] = sluicev1.Identity(x)
	}
	return out
}

// release creates a Release "<service>-<env>".
func (f *fixture) release(service string, envName sluicev1.EnvironmentName, rule sluicev1.ApprovalRule, labels map[string]string, opts ...func(*sluicev1.Release)) *sluicev1.Release {
	f.t.Helper()
	rel := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ReleaseName(service, envName), Namespace: f.ns, Labels: labels},
		Spec: sluicev1.ReleaseSpec{
			Repository:      "infra",
			Service:         service,
			Environment:     envName,
			SourcePath:      sluicev1.RelativePath("services/" + service),
			TargetNamespace: service + "-" + string(envName),
			Chart:           sluicev1.ChartSource{Path: "charts/service"},
			Delivery:        sluicev1.DeliveryHelm,
			Rule:            rule,
		},
	}
	for _, o := range opts {
		o(rel)
	}
	require.NoError(f.t, f.c.Create(ctx(f.t), rel))
	return rel
}

var revisions atomic.Int64

// revision returns a new commit SHA.
func revision() string {
	n := revisions.Add(1)
	return fmt.Sprintf("%010x%030x", n, n)
}

type changeOpt func(*sluicev1.ChangeRequest)

func withRisk(r sluicev1.Risk) changeOpt {
	return func(c *sluicev1.ChangeRequest) { c.Spec.Verdict.Risk = r }
}

func withFindings(f ...sluicev1.Finding) changeOpt {
	return func(c *sluicev1.ChangeRequest) { c.Spec.Verdict.Findings = f }
}

func withContent(content string) changeOpt {
	return func(c *sluicev1.ChangeRequest) { c.Spec.ContentDigest = sluicev1.SHA256Digest([]byte(content)) }
}

func asPreview(pr int64) changeOpt {
	return func(c *sluicev1.ChangeRequest) {
		c.Name = sluicev1.PreviewChangeRequestName(c.Spec.Release, pr, c.Spec.Revision)
		c.Spec.PullRequest = &sluicev1.PullRequestRef{Number: pr, HeadSHA: c.Spec.Revision, Preview: true}
	}
}

// change creates a ChangeRequest for a release at a new revision, with a
// valid approvalDigest.
func (f *fixture) change(rel *sluicev1.Release, rule sluicev1.ApprovalRule, opts ...changeOpt) *sluicev1.ChangeRequest {
	f.t.Helper()
	rev := revision()
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(rel.Name, rev, 1), Namespace: f.ns, Labels: map[string]string{sluicev1.LabelRelease: rel.Name}},
		Spec: sluicev1.ChangeRequestSpec{
			Release:         rel.Name,
			Revision:        rev,
			Attempt:         1,
			Authors:         ids("github:dave", "email:dave@example.com"),
			TargetNamespace: rel.Spec.TargetNamespace,
			Delivery:        sluicev1.DeliveryHelm,
			Source:          appliertest.SourceOf(rel.Spec),
			Artifact: sluicev1.ArtifactReference{
				URL:    "http://sluice-syncer.sluice-system.svc/artifacts/" + rev + ".tar.gz",
				SHA256: sluicev1.SHA256Digest([]byte("tar.gz of " + rev)),
			},
			ContentDigest:  sluicev1.SHA256Digest([]byte("content of " + rev)),
			ManifestDigest: sluicev1.SHA256Digest([]byte("manifests of " + rev)),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskMedium},
			Rule:           rule,
		},
	}
	cr.Namespace = f.ns
	for _, o := range opts {
		o(cr)
	}
	if cr.Spec.ApprovalDigest == "" {
		cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	}
	require.NoError(f.t, f.c.Create(ctx(f.t), cr))
	return cr
}

type approvalOpt func(*sluicev1.Approval)

func inGroups(g ...string) approvalOpt {
	return func(a *sluicev1.Approval) { a.Spec.Groups = g }
}

func fromPullRequest() approvalOpt {
	return func(a *sluicev1.Approval) {
		a.Spec.Source = sluicev1.SourcePullRequest
		a.Spec.PullRequest = 7
		a.Spec.ReviewID = 1000 + revisions.Add(1)
	}
}

func forDigest(release string, d sluicev1.Digest) approvalOpt {
	return func(a *sluicev1.Approval) {
		a.Spec.Release = release
		a.Spec.ApprovalDigest = d
	}
}

// decide creates an Approval for the change's digest.
func (f *fixture) decide(cr *sluicev1.ChangeRequest, approver string, d sluicev1.Decision, opts ...approvalOpt) *sluicev1.Approval {
	f.t.Helper()
	a := &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "appr-", Namespace: f.ns},
		Spec: sluicev1.ApprovalSpec{
			Release:        cr.Spec.Release,
			ChangeRequest:  cr.Name,
			ApprovalDigest: cr.Spec.ApprovalDigest,
			Decision:       d,
			Approver:       sluicev1.Identity(approver),
			Source:         sluicev1.SourceKubernetes,
		},
	}
	for _, o := range opts {
		o(a)
	}
	require.NoError(f.t, f.c.Create(ctx(f.t), a))
	return a
}

// get reads a ChangeRequest fresh from the API server.
func (f *fixture) get(cr *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	f.t.Helper()
	out := &sluicev1.ChangeRequest{}
	require.NoError(f.t, f.c.Get(ctx(f.t), client.ObjectKeyFromObject(cr), out))
	return out
}

func (f *fixture) getRelease(name string) *sluicev1.Release {
	f.t.Helper()
	out := &sluicev1.Release{}
	require.NoError(f.t, f.c.Get(ctx(f.t), client.ObjectKey{Namespace: f.ns, Name: name}, out))
	return out
}

// waitFor bounds every wait for the operator: generous, because a busy
// machine may take long to get there, and only a failing test waits it out.
const waitFor = 2 * time.Minute

// eventually waits until cond holds for the ChangeRequest, describing it on
// failure.
func (f *fixture) eventually(cr *sluicev1.ChangeRequest, what string, cond func(*sluicev1.ChangeRequest) bool) *sluicev1.ChangeRequest {
	f.t.Helper()
	var last *sluicev1.ChangeRequest
	deadline := time.Now().Add(waitFor)
	for time.Now().Before(deadline) {
		last = f.get(cr)
		if cond(last) {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	f.t.Fatalf("ChangeRequest %s never reached %q; last status: %s", cr.Name, what, describe(last))
	return nil
}

// nextSecondAfter waits until the clock (the API server's: same machine)
// is in a later second than t, so an object created now has a later
// creationTimestamp, which has second resolution.
func (f *fixture) nextSecondAfter(t time.Time) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return time.Now().Truncate(time.Second).After(t) }, waitFor, 20*time.Millisecond)
}

// phase waits for a phase.
func (f *fixture) phase(cr *sluicev1.ChangeRequest, p sluicev1.ChangeRequestPhase) *sluicev1.ChangeRequest {
	f.t.Helper()
	return f.eventually(cr, "phase "+string(p), func(c *sluicev1.ChangeRequest) bool { return c.Status.Phase == p })
}

// waitingWith waits until the change is AwaitingApproval with exactly these
// counted approvers.
func (f *fixture) waitingWith(cr *sluicev1.ChangeRequest, approvers ...string) *sluicev1.ChangeRequest {
	f.t.Helper()
	want := strings.Join(approvers, ",")
	return f.eventually(cr, "AwaitingApproval approved by ["+want+"]", func(c *sluicev1.ChangeRequest) bool {
		got := make([]string, len(c.Status.ApprovedBy))
		for i, a := range c.Status.ApprovedBy {
			got[i] = string(a)
		}
		return c.Status.Phase == sluicev1.PhaseAwaitingApproval && strings.Join(got, ",") == want
	})
}

func describe(cr *sluicev1.ChangeRequest) string {
	if cr == nil {
		return "<none>"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "phase=%s approvals=%d approvedBy=%v rejectedBy=%v", cr.Status.Phase, cr.Status.Approvals, cr.Status.ApprovedBy, cr.Status.RejectedBy)
	for _, c := range cr.Status.Conditions {
		fmt.Fprintf(&b, " %s=%s/%s(%s)", c.Type, c.Status, c.Reason, c.Message)
	}
	return b.String()
}

func condition(cr *sluicev1.ChangeRequest, t string) *metav1.Condition {
	return meta.FindStatusCondition(cr.Status.Conditions, t)
}

// recorded returns the test applier's record of a change.
func (f *fixture) recorded(cr *sluicev1.ChangeRequest) (testapplier.Record, bool) {
	f.t.Helper()
	rec, ok, err := testapplier.Lookup(ctx(f.t), f.c, f.ns, "", cr.Name)
	require.NoError(f.t, err)
	return rec, ok
}

// holdLock makes another live change hold the release's apply lock: a
// waiting change of another release (which cannot supersede anything).
func (f *fixture) holdLock(rel *sluicev1.Release) *sluicev1.ChangeRequest {
	f.t.Helper()
	other := f.release("lockholder"+rand.String(4), "prod", sluicev1.ApprovalRule{Required: 5}, nil)
	holder := f.change(other, sluicev1.ApprovalRule{Required: 5})
	f.phase(holder, sluicev1.PhaseAwaitingApproval)
	f.setLock(rel.Name, holder.Name)
	return holder
}

// setLock writes Release.status.currentChange as another replica would.
func (f *fixture) setLock(release, holder string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		rel := f.getRelease(release)
		rel.Status.CurrentChange = holder
		err := f.c.Status().Update(ctx(f.t), rel)
		return err == nil || !apierrors.IsConflict(err) && f.fail(err)
	}, waitFor, 50*time.Millisecond)
}

func (f *fixture) fail(err error) bool {
	f.t.Fatalf("unexpected error: %v", err)
	return false
}

// blocker is a hook that signals when it is reached and then blocks until
// released or the context ends.
type blocker struct {
	once    sync.Once
	reached chan struct{}
	release chan struct{}
}

func newBlocker() *blocker {
	return &blocker{reached: make(chan struct{}), release: make(chan struct{})}
}

func (b *blocker) hook(ctx context.Context, _ applier.Request) error {
	b.once.Do(func() { close(b.reached) })
	select {
	case <-b.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// recordedKey reads one key of the test applier's ConfigMap.
func (f *fixture) recordedKey(key string) (string, bool) {
	f.t.Helper()
	cm := &corev1.ConfigMap{}
	err := f.c.Get(ctx(f.t), client.ObjectKey{Namespace: f.ns, Name: testapplier.DefaultConfigMap}, cm)
	if apierrors.IsNotFound(err) {
		return "", false
	}
	require.NoError(f.t, err)
	v, ok := cm.Data[key]
	return v, ok
}
