package helm

// The wait for readiness through the operator's manager: the worker is
// free while a change waits, a restart resumes the wait without a second
// install, and objects that never get ready fail the change at Helm's
// timeout. envtest runs no kubelet and no Deployment controller: the
// tests write the status they would.

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/release"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/podhealth"
)

// waitForReadiness waits until cr is Applying and says it waits for its
// objects to be ready (Progressing, no failure).
func waitForReadiness(t *testing.T, cr *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	t.Helper()
	got := &sluicev1.ChangeRequest{}
	require.Eventually(t, func() bool {
		require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(cr), got))
		require.False(t, got.Status.Phase.IsTerminal(), "ended %s: %+v", got.Status.Phase, got.Status.Conditions)
		c := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionApplied)
		return got.Status.Phase == sluicev1.PhaseApplying && c != nil && c.Reason == sluicev1.ReasonWaitingForReadiness &&
			meta.IsStatusConditionTrue(got.Status.Conditions, sluicev1.ConditionProgressing)
	}, 90*time.Second, 100*time.Millisecond, "never waited for readiness")
	return got
}

// readyPod creates a Ready pod of the fixture's release, as the kubelet
// would report it.
func (f *fixture) readyPod(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: f.release.Name + "-abc12", Namespace: f.target,
			Labels: map[string]string{podhealth.InstanceLabel: f.release.Name, "app.kubernetes.io/name": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example.com/web:1.0.0"}}},
	}
	require.NoError(t, env.Client.Create(ctx, pod))
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	require.NoError(t, env.Client.Status().Update(ctx, pod))
}

// A change waiting for readiness when the operator is killed is still
// waiting after the restart: the new operator looks, installs nothing,
// and applies the change once its objects are ready, with the one Helm
// revision the first operator installed. The new operator polls hourly:
// the pod turning Ready is what wakes the change.
func TestOperator_aChangeWaitingForReadinessResumesAfterARestartWithOneRevision(t *testing.T) {
	f := newFixture(t)
	f.createObjects(t)
	cr := f.submit(t, f.change("message: ready later\n", changeOpts{}))

	first := startOperatorWith(t, f, "operator-before-restart", func(cc *childConfig) { cc.Wait = true })
	waitForReadiness(t, cr)
	require.Equal(t, []release.Status{release.StatusPendingInstall}, f.statuses())
	first.kill()

	second := startOperatorWith(t, f, "operator-after-restart", func(cc *childConfig) { cc.Wait, cc.ReadyPoll = true, time.Hour })
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(second.log)
		return strings.Contains(string(b), "Waiting for the Helm release to be ready")
	}, 90*time.Second, 100*time.Millisecond, "the restarted operator never looked at the waiting change")
	require.Equal(t, []release.Status{release.StatusPendingInstall}, f.statuses(), "looked at, not installed again")
	waitForReadiness(t, cr)

	f.makeReady(t)
	f.readyPod(t)
	done := waitPhase(t, cr, sluicev1.PhaseApplied)
	require.Equal(t, int32(1), done.Status.Apply.HelmRevision)
	require.Equal(t, []release.Status{release.StatusDeployed}, f.statuses(), "one Helm revision for the change")
	require.Equal(t, marker(cr), f.helmHistory()[0].Info.Description)
}

// With one worker, a change waiting for its pods holds no worker: another
// release's change is still approved, applied and, once ready, Applied
// while the first one waits. (A blocking Helm wait would hold the one
// worker until Helm's timeout, five minutes.)
func TestOperator_theGateDecidesOtherChangesWhileOneWaitsForReadiness(t *testing.T) {
	slow, quick := newFixture(t), newFixture(t)
	slow.createObjects(t)
	quick.createObjects(t)
	startOperatorWith(t, slow, "operator", func(cc *childConfig) {
		cc.Wait, cc.Concurrency, cc.Also = true, 1, []string{quick.ctl}
	})

	waiting := slow.submit(t, slow.change("message: slow\n", changeOpts{}))
	waitForReadiness(t, waiting)
	other := quick.submit(t, quick.change("message: quick\n", changeOpts{}))
	waitForReadiness(t, other)
	quick.makeReady(t)
	waitPhase(t, other, sluicev1.PhaseApplied)

	still := &sluicev1.ChangeRequest{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(waiting), still))
	require.Equal(t, sluicev1.PhaseApplying, still.Status.Phase, "the slow change still waits for its pods")
	slow.makeReady(t)
	waitPhase(t, waiting, sluicev1.PhaseApplied)
}

// Objects that never get ready fail the change at Helm's timeout, with
// the reason and what was not ready, and a first install leaves nothing.
func TestOperator_aChangeWhosePodsNeverGetReadyFailsAtItsTimeout(t *testing.T) {
	f := newFixture(t)
	f.createObjects(t)
	startOperatorWith(t, f, "operator", func(cc *childConfig) { cc.Wait, cc.Timeout = true, 3*time.Second })

	failed := waitPhase(t, f.submit(t, f.change("message: never ready\n", changeOpts{})), sluicev1.PhaseFailed)
	c := meta.FindStatusCondition(failed.Status.Conditions, sluicev1.ConditionApplied)
	require.NotNil(t, c)
	require.Equal(t, sluicev1.ReasonReadyTimeout, c.Reason)
	require.Contains(t, c.Message, "the objects of Helm revision 1 were not ready within 3s: Deployment "+f.release.Name)
	f.requireNothingInstalled()
}
