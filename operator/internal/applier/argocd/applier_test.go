package argocd

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/operator/api/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
)

// Argo CD cannot run here (it is a set of controllers and a repo server
// from container images). The tests run against the real Application CRD
// on a real API server, with argoStandIn doing what Argo CD's application
// controller does with an Application: take the operation, report the sync
// outcome and health in the status, and honour the resources finalizer.

var (
	env     *testenv.Env
	counter atomic.Int32
)

func TestMain(m *testing.M) {
	var err error
	if env, err = testenv.Start(testenv.Options{}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = env.Stop()
	os.Exit(code)
}

// outcome is what the stand-in makes of a sync of a revision.
type outcome string

const (
	succeed outcome = "succeed"
	fail    outcome = "fail"
	hang    outcome = "hang" // Running, until told otherwise
)

// argoStandIn plays Argo CD's application controller for one namespace.
type argoStandIn struct {
	ns       string
	mu       sync.Mutex
	outcomes map[string]outcome // by revision; succeed when unset
	ops      int                // operations taken
}

func startArgo(t *testing.T, ns string) *argoStandIn {
	a := &argoStandIn{ns: ns, outcomes: map[string]outcome{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			a.step(ctx)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return a
}

func (a *argoStandIn) set(rev string, o outcome) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.outcomes[rev] = o
}

func (a *argoStandIn) operations() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ops
}

func (a *argoStandIn) step(ctx context.Context) {
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(ApplicationGVK.GroupVersion().WithKind("ApplicationList"))
	if err := env.Client.List(ctx, list, client.InNamespace(a.ns)); err != nil {
		return
	}
	for i := range list.Items {
		app := &list.Items[i]
		if app.GetDeletionTimestamp() != nil {
			// Pruned what it deployed: let the Application go.
			app.SetFinalizers(nil)
			_ = env.Client.Update(ctx, app)
			continue
		}
		a.mu.Lock()
		op, pending, _ := unstructured.NestedMap(app.Object, "operation")
		rev, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "operation", "sync", "revision")
		if pending {
			rev, _, _ = unstructured.NestedString(op, "sync", "revision")
			a.ops++
			delete(app.Object, "operation")
			_ = unstructured.SetNestedMap(app.Object, map[string]any{
				"phase": "Running", "message": "syncing", "operation": op, "startedAt": time.Now().UTC().Format(time.RFC3339),
			}, "status", "operationState")
		}
		o := a.outcomes[rev]
		a.mu.Unlock()
		phase, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "phase")
		if phase != "Running" {
			continue
		}
		switch o {
		case hang:
		case fail:
			_ = unstructured.SetNestedField(app.Object, "Failed", "status", "operationState", "phase")
			_ = unstructured.SetNestedField(app.Object, "one or more objects failed to apply: Deployment.apps \"web\" is invalid: "+strings.Repeat("€", 300), "status", "operationState", "message")
		default:
			_ = unstructured.SetNestedField(app.Object, "Succeeded", "status", "operationState", "phase")
			_ = unstructured.SetNestedField(app.Object, "successfully synced (all tasks run)", "status", "operationState", "message")
			_ = unstructured.SetNestedField(app.Object, rev, "status", "operationState", "syncResult", "revision")
			_ = unstructured.SetNestedField(app.Object, "Synced", "status", "sync", "status")
			_ = unstructured.SetNestedField(app.Object, rev, "status", "sync", "revision")
			_ = unstructured.SetNestedField(app.Object, "Healthy", "status", "health", "status")
		}
		_ = env.Client.Update(ctx, app)
	}
}

type fixture struct {
	t       *testing.T
	ctl     string
	repo    *sluicev1.Repository
	release *sluicev1.Release
	applier *Applier
	argo    *argoStandIn
}

func newFixture(t *testing.T, rbac bool) *fixture {
	t.Helper()
	ctx := context.Background()
	f := &fixture{t: t, ctl: fmt.Sprintf("argo-ctl-%d", counter.Add(1))}
	require.NoError(t, env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: f.ctl}}))
	if rbac {
		require.NoError(t, env.GrantRole(ctx, f.ctl, "argocd-apps", types.NamespacedName{Namespace: f.ctl, Name: "deployer"},
			[]rbacv1.PolicyRule{{APIGroups: []string{"argoproj.io"}, Resources: []string{"applications"}, Verbs: []string{"*"}}},
			authorizationv1.ResourceAttributes{Verb: "create", Group: "argoproj.io", Resource: "applications"}))
	}
	f.repo = &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: f.ctl},
		Spec:       sluicev1.RepositorySpec{URL: "https://git.example.com/platform/infra.git", ServiceAccountName: "deployer", TargetNamespaces: []string{"web-*"}},
	}
	f.release = &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "web-prod", Namespace: f.ctl, UID: types.UID(appliertest.RandomSHA())},
		Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: "web", Environment: "prod", SourcePath: "services/web",
			TargetNamespace: "web-prod", Chart: sluicev1.ChartSource{Path: "charts/service"},
			Values: []sluicev1.RelativePath{"services/web/values.yaml", "services/web/values-prod.yaml"}, Delivery: sluicev1.DeliveryArgoCD,
		},
	}
	a, err := New(Options{Config: env.Config, Wait: 20 * time.Second, Log: logr.Discard()})
	require.NoError(t, err)
	f.applier = a
	f.argo = startArgo(t, f.ctl)
	return f
}

func (f *fixture) change() *sluicev1.ChangeRequest {
	rev := appliertest.RandomSHA()
	return &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, rev, 1), Namespace: f.ctl},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: rev, Attempt: 1, TargetNamespace: "web-prod", Delivery: sluicev1.DeliveryArgoCD,
		},
	}
}

func (f *fixture) apply(cr *sluicev1.ChangeRequest) (applier.Result, error) {
	return f.applier.Apply(context.Background(), applier.Request{Change: cr, Release: f.release, Repository: f.repo})
}

func (f *fixture) application() *unstructured.Unstructured {
	f.t.Helper()
	app := newApplication()
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, app))
	return app
}

func TestApply_pinsTheApplicationToTheApprovedCommitAndWaitsForArgoCD(t *testing.T) {
	f := newFixture(t, true)
	cr := f.change()
	res, err := f.apply(cr)
	require.NoError(t, err)
	require.Contains(t, res.Message, "synced revision "+cr.Spec.Revision[:10])

	app := f.application()
	spec := app.Object["spec"].(map[string]any)
	src := spec["source"].(map[string]any)
	require.Equal(t, cr.Spec.Revision, src["targetRevision"], "pinned to the approved commit, never a branch")
	require.Equal(t, f.repo.Spec.URL, src["repoURL"])
	require.Equal(t, "charts/service", src["path"])
	require.Equal(t, []any{"../../services/web/values.yaml", "../../services/web/values-prod.yaml"}, src["helm"].(map[string]any)["valueFiles"])
	require.Equal(t, "web-prod", spec["destination"].(map[string]any)["namespace"])
	require.Equal(t, DefaultProject, spec["project"])
	owner := metav1.GetControllerOf(app)
	require.NotNil(t, owner)
	require.Equal(t, f.release.UID, owner.UID, "owned by the Release")
	require.Contains(t, app.GetFinalizers(), ResourcesFinalizer)
	require.Equal(t, 1, f.argo.operations())

	// A re-run (the operator restarted before recording it) asks for no
	// second sync.
	_, err = f.apply(cr)
	require.NoError(t, err)
	require.Equal(t, 1, f.argo.operations())

	// The next change re-pins the same Application.
	next := f.change()
	_, err = f.apply(next)
	require.NoError(t, err)
	require.Equal(t, next.Spec.Revision, f.application().Object["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"])
	require.Equal(t, 2, f.argo.operations())
}

func TestApply_aFailedSyncFailsTheChangeWithArgoCDsMessage(t *testing.T) {
	f := newFixture(t, true)
	cr := f.change()
	f.argo.set(cr.Spec.Revision, fail)
	_, err := f.apply(cr)
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "ended Failed")
	require.Contains(t, fail.Message, "failed to apply")
	require.True(t, utf8.ValidString(fail.Message), "Argo CD's long message is cut on a character boundary")
}

func TestApply_aLongSyncIsLookedAtAgainNotAskedForTwice(t *testing.T) {
	f := newFixture(t, true)
	f.applier.opts.Wait = time.Second
	cr := f.change()
	f.argo.set(cr.Spec.Revision, hang)
	_, err := f.apply(cr)
	require.ErrorIs(t, err, ErrSyncing)
	_, ok := applier.AsFailure(err)
	require.False(t, ok, "still syncing is retried, not a failure")
	require.Contains(t, err.Error(), "operation Running")

	_, err = f.apply(cr)
	require.ErrorIs(t, err, ErrSyncing)
	require.Equal(t, 1, f.argo.operations(), "the running sync is not asked for again")

	f.argo.set(cr.Spec.Revision, succeed)
	require.Eventually(t, func() bool {
		_, err := f.apply(cr)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond)
	require.Equal(t, 1, f.argo.operations())
}

func TestApply_refusesWhatItMayNotTouch(t *testing.T) {
	f := newFixture(t, true)

	outside := f.change()
	outside.Spec.TargetNamespace = "payments-prod"
	_, err := f.apply(outside)
	appliertest.RequireFailure(t, err, sluicev1.ReasonNamespaceNotAllowed)

	// An Application of the same name that the Release does not control.
	foreign := newApplication()
	foreign.SetNamespace(f.ctl)
	foreign.SetName(f.release.Name)
	foreign.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": "https://git.example.com/other.git", "path": "x", "targetRevision": "main"},
		"destination": map[string]any{"server": InClusterServer, "namespace": "web-prod"},
	}
	require.NoError(t, env.Client.Create(context.Background(), foreign))
	_, err = f.apply(f.change())
	appliertest.RequireFailure(t, err, sluicev1.ReasonOwnershipConflict)
	require.Equal(t, "main", f.application().Object["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"], "left alone")
	require.NoError(t, f.applier.Cleanup(context.Background(), f.release, f.repo), "cleanup leaves a foreign Application alone")
	f.application()
}

func TestApply_anApplicationOutsideTheReleasesNamespaceIsNeverCreated(t *testing.T) {
	f := newFixture(t, true)

	// Allowed by the Repository, but not the Release's namespace.
	elsewhere := f.change()
	elsewhere.Spec.TargetNamespace = "web-staging"
	_, err := f.apply(elsewhere)
	appliertest.RequireFailure(t, err, sluicev1.ReasonOutsideNamespace)

	// A verdict that found an object outside the namespace (the gate never
	// hands one over; the applier holds if it did).
	reaching := f.change()
	reaching.Spec.Verdict.Findings = []sluicev1.Finding{{Severity: sluicev1.SeverityDeny, Source: "helm", Policy: "helm.namespace",
		Resource: "ClusterRoleBinding/planted", Message: "ClusterRoleBinding planted is cluster-scoped"}}
	_, err = f.apply(reaching)
	appliertest.RequireFailure(t, err, sluicev1.ReasonOutsideNamespace)

	err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, newApplication())
	require.True(t, apierrors.IsNotFound(err), "no Application: %v", err)

	_, err = f.apply(f.change())
	require.NoError(t, err)
	require.Equal(t, "web-prod", f.application().Object["spec"].(map[string]any)["destination"].(map[string]any)["namespace"])
}

func TestApply_aServiceAccountWithoutRightsFailsWithAReadableReason(t *testing.T) {
	f := newFixture(t, false)
	_, err := f.apply(f.change())
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "system:serviceaccount:"+f.ctl+":deployer may not read the Application")
	require.Contains(t, fail.Message, "give it a Role there")
}

func TestCleanup_deletesTheApplicationAndWaitsForArgoCDToPrune(t *testing.T) {
	f := newFixture(t, true)
	_, err := f.apply(f.change())
	require.NoError(t, err)
	err = f.applier.Cleanup(context.Background(), f.release, f.repo)
	require.Error(t, err, "not done while Argo CD prunes")
	require.Eventually(t, func() bool {
		return f.applier.Cleanup(context.Background(), f.release, f.repo) == nil
	}, 30*time.Second, 100*time.Millisecond)
	err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, newApplication())
	require.True(t, apierrors.IsNotFound(err), "the Application is gone: %v", err)
}

func TestFlags_registerWhenArgoCDsApplicationKindIsServed(t *testing.T) {
	reg := applier.Registry{}
	require.NoError(t, (&Flags{Apply: true, Wait: time.Second}).Register(reg, env.Config, logr.Discard()))
	a, ok := reg.For(sluicev1.DeliveryArgoCD)
	require.True(t, ok, "envtest serves the Application CRD")
	require.Equal(t, Name, a.Name())

	reg = applier.Registry{}
	require.NoError(t, (&Flags{Apply: false}).Register(reg, env.Config, logr.Discard()))
	_, ok = reg.For(sluicev1.DeliveryArgoCD)
	require.False(t, ok)
}

func TestRelPath_valueFilesAreRelativeToTheChartAndStayInTheRepository(t *testing.T) {
	for _, tc := range []struct{ base, target, want string }{
		{"charts/service", "services/web/values.yaml", "../../services/web/values.yaml"},
		{"charts/service", "charts/service/values-prod.yaml", "values-prod.yaml"},
		{"services/web/chart", "services/web/values.yaml", "../values.yaml"},
	} {
		got, err := relPath(tc.base, tc.target)
		require.NoError(t, err)
		require.Equal(t, tc.want, got)
	}
	for _, bad := range []string{"../outside.yaml", "..", "/etc/passwd"} {
		_, err := relPath("charts/service", bad)
		require.Error(t, err, bad)
	}
}
