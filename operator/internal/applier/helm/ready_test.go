package helm

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
)

// waitingApplier is the fixture's applier with Wait on and the given Helm
// timeout.
func (f *fixture) waitingApplier(timeout time.Duration) {
	f.t.Helper()
	fetcher, err := artifact.NewFetcher(server.BaseURL())
	require.NoError(f.t, err)
	fetcher.TempDir = f.t.TempDir()
	a, err := New(Options{Config: env.Config, Fetcher: fetcher, Wait: true, Timeout: timeout, Log: logr.Discard()})
	require.NoError(f.t, err)
	f.applier = a
}

// makeReady writes the status a kubelet and the Deployment controller
// would write once the fixture's Deployment rolled out (envtest runs
// neither).
func (f *fixture) makeReady(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	dep := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKey{Namespace: f.target, Name: f.release.Name}, dep))
	n := *dep.Spec.Replicas
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: n, UpdatedReplicas: n, ReadyReplicas: n, AvailableReplicas: n,
		Conditions: []appsv1.DeploymentCondition{
			{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"},
			{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionTrue, Reason: "NewReplicaSetAvailable"},
		}}
	require.NoError(t, env.Client.Status().Update(ctx, dep))
}

// requireWaiting checks err is the Waiting of a change whose objects are
// not ready yet.
func requireWaiting(t *testing.T, err error) *applier.Waiting {
	t.Helper()
	w, ok := applier.AsWaiting(err)
	require.True(t, ok, "want a Waiting, got %v", err)
	require.Equal(t, sluicev1.ReasonWaitingForReadiness, w.Reason)
	return w
}

// statuses are the statuses of the release's Helm revisions, oldest first.
func (f *fixture) statuses() []release.Status {
	var out []release.Status
	for _, r := range f.helmHistory() {
		out = append(out, r.Info.Status)
	}
	return out
}

// With Wait, Helm installs without waiting and the call returns at once:
// the revision stays pending (as it does while Helm's own wait runs), a
// later call only looks (one revision, however often it is called), and
// the change is applied once its objects are ready by kstatus. An upgrade
// keeps the revision before it deployed until then.
func TestApply_withWaitReturnsWhileTheObjectsAreNotReadyAndAppliesOnceTheyAre(t *testing.T) {
	f := newFixture(t)
	f.waitingApplier(5 * time.Minute)

	first := f.change("message: one\n", changeOpts{})
	_, err := f.apply(first)
	w := requireWaiting(t, err)
	require.Contains(t, w.Message, "Helm revision 1 of "+f.target+"/"+f.release.Name+" is applied; waiting for its objects to be ready")
	require.Equal(t, []release.Status{release.StatusPendingInstall}, f.statuses())
	require.Equal(t, marker(first), f.helmHistory()[0].Info.Description)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "one", cm.Data["message"], "the objects are applied; only readiness is waited for")

	_, err = f.apply(first)
	require.Equal(t, w.Message, requireWaiting(t, err).Message, "the same message at every look: no status write")
	require.Len(t, f.helmHistory(), 1, "a look installs nothing")

	f.makeReady(t)
	res, err := f.apply(first)
	require.NoError(t, err)
	require.Equal(t, int32(1), res.HelmRevision)
	require.Contains(t, res.Message, "installed, its objects ready")
	require.Equal(t, []release.Status{release.StatusDeployed}, f.statuses())

	// An upgrade that changes the Deployment: its new generation is not
	// observed yet.
	second := f.change("message: two\nreplicas: 2\n", changeOpts{})
	_, err = f.apply(second)
	requireWaiting(t, err)
	require.Equal(t, []release.Status{release.StatusDeployed, release.StatusPendingUpgrade}, f.statuses(),
		"the revision before stays deployed while the new one waits")
	f.makeReady(t)
	res, err = f.apply(second)
	require.NoError(t, err)
	require.Equal(t, int32(2), res.HelmRevision)
	require.Equal(t, []release.Status{release.StatusSuperseded, release.StatusDeployed}, f.statuses())
	res, err = f.apply(second)
	require.NoError(t, err, "a change already applied is confirmed")
	require.Equal(t, int32(2), res.HelmRevision)
}

// Objects that are not ready when Helm's timeout ends fail the change as
// Helm's wait with rollback would: a first install is marked failed and
// uninstalled, an upgrade marked failed and rolled back to the revision
// before it.
func TestApply_withWaitObjectsNotReadyInTimeFailAndAreRolledBack(t *testing.T) {
	f := newFixture(t)
	f.waitingApplier(2 * time.Second)

	failure := func(cr *sluicev1.ChangeRequest) *applier.Failure {
		var err error
		require.Eventually(t, func() bool {
			_, err = f.apply(cr)
			_, waiting := applier.AsWaiting(err)
			return !waiting
		}, 90*time.Second, 200*time.Millisecond, "still waiting after the timeout")
		fail, ok := applier.AsFailure(err)
		require.True(t, ok, "want a Failure, got %v", err)
		require.Equal(t, sluicev1.ReasonReadyTimeout, fail.Reason)
		return fail
	}

	fail := failure(f.change("message: never ready\n", changeOpts{}))
	require.Contains(t, fail.Message, "the objects of Helm revision 1 were not ready within 2s: Deployment "+f.release.Name)
	require.Contains(t, fail.Message, "; uninstalled")
	f.requireNothingInstalled()

	// A revision that gets ready, then an upgrade that never does.
	good := f.change("message: good\n", changeOpts{})
	_, err := f.apply(good)
	requireWaiting(t, err)
	f.makeReady(t)
	_, err = f.apply(good)
	require.NoError(t, err)

	fail = failure(f.change("message: bad\nreplicas: 3\n", changeOpts{}))
	require.Contains(t, fail.Message, "rolled back to revision 1")
	h := f.helmHistory()
	require.Len(t, h, 3)
	require.Equal(t, []release.Status{release.StatusSuperseded, release.StatusFailed, release.StatusDeployed}, f.statuses())
	require.Equal(t, `Upgrade "`+f.release.Name+`" failed: timed out waiting for the condition`, h[1].Info.Description)
	require.Equal(t, "Rollback to 1", h[2].Info.Description)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "good", cm.Data["message"], "the objects are back at revision 1")
}

// Helm runs post-install and post-upgrade hooks only after its wait, so a
// record with such hooks keeps Helm's blocking wait: nothing is deferred.
func TestApplyGate_aRecordWithPostHooksKeepsHelmsBlockingWait(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hooks  []*release.Hook
		defers bool
	}{
		{"no hooks", nil, true},
		{"a pre-install hook", []*release.Hook{{Events: []release.HookEvent{release.HookPreInstall}}}, true},
		{"a test hook", []*release.Hook{{Events: []release.HookEvent{release.HookTest}}}, true},
		{"a post-install hook", []*release.Hook{{Events: []release.HookEvent{release.HookPreInstall, release.HookPostInstall}}}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			blocking := false
			g := &applyGate{deferWait: true, postHook: release.HookPostInstall, blockingWait: func() { blocking = true }}
			g.created(&release.Release{Version: 1, Hooks: tc.hooks, Info: &release.Info{Status: release.StatusPendingInstall}})
			require.Equal(t, tc.defers, g.waitsItself())
			require.Equal(t, !tc.defers, blocking)
			stored, skip := g.deferred(&release.Release{Version: 1, Info: &release.Info{Status: release.StatusDeployed}})
			require.False(t, skip)
			want := release.StatusDeployed
			if tc.defers {
				want = release.StatusPendingInstall
			}
			require.Equal(t, want, stored.Info.Status)
		})
	}
}
