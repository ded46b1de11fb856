package controller

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/podhealth"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

// healthFixture runs an operator and applies one change of a release
// whose target namespace exists; it returns the release as applied.
func healthFixture(t *testing.T) (*fixture, *sluicev1.Release) {
	f := newFixture(t)
	f.op = startOperator(t, f.ns, operatorConfig{applier: &testapplier.Applier{Client: env.Client}})
	rel := f.release("checkout", "prod", twoOf, nil, func(r *sluicev1.Release) { r.Spec.TargetNamespace = "checkout-" + f.ns })
	require.NoError(t, f.c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rel.Spec.TargetNamespace}}))
	cr := f.change(rel, twoOf)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:bob", sluicev1.DecisionApprove)
	f.phase(cr, sluicev1.PhaseApplied)
	require.Eventually(t, func() bool { return f.getRelease(rel.Name).Status.AppliedChange == cr.Name }, waitFor, 20*time.Millisecond)
	return f, f.getRelease(rel.Name)
}

// pod creates a pod of the release (its instance label) in ns, then
// writes its container status as a kubelet would (there is none).
func (f *fixture) pod(ns, name, instance string, cs corev1.ContainerStatus) *corev1.Pod {
	f.t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{podhealth.InstanceLabel: instance}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:2"}}}}
	require.NoError(f.t, f.c.Create(ctx(f.t), p))
	f.setPod(p, cs)
	return p
}

// setPod writes the pod's one container status.
func (f *fixture) setPod(p *corev1.Pod, cs corev1.ContainerStatus) {
	f.t.Helper()
	require.NoError(f.t, f.c.Get(ctx(f.t), client.ObjectKeyFromObject(p), p))
	cs.Name, cs.Image = "web", "registry.invalid/web:2"
	p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
	require.NoError(f.t, f.c.Status().Update(ctx(f.t), p))
}

func waitingCS(reason, msg string, restarts int32) corev1.ContainerStatus {
	return corev1.ContainerStatus{RestartCount: restarts, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}}}
}

// degraded waits until the Release's Degraded condition satisfies cond.
func (f *fixture) degraded(name, what string, cond func(*metav1.Condition) bool) *metav1.Condition {
	f.t.Helper()
	var last *metav1.Condition
	require.Eventuallyf(f.t, func() bool {
		last = releaseCondition(f.getRelease(name), sluicev1.ConditionDegraded)
		return last != nil && cond(last)
	}, waitFor, 10*time.Millisecond, "Release %s: %s; Degraded is %+v", name, what, last)
	return last
}

// A pod of the applied release that cannot pull its image makes the
// Release Degraded (ImagePullFailed, with the pod, image and the
// registry's message) as soon as its status says so; the pod recovering
// clears it. A stuck pod with the release's name in another namespace is
// not the release's.
func TestReleaseHealth_imagePullFailureIsDegradedAtOnceAndClearsOnRecovery(t *testing.T) {
	f, rel := healthFixture(t)
	ns := rel.Spec.TargetNamespace
	require.Equal(t, metav1.ConditionFalse, releaseCondition(rel, sluicev1.ConditionDegraded).Status)

	// Another namespace, same instance label: not this release's pod.
	other := "other-" + f.ns
	require.NoError(t, f.c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: other}}))
	f.pod(other, "web-x", rel.Name, waitingCS("CrashLoopBackOff", "back-off", 3))

	start := time.Now()
	p := f.pod(ns, "web-1", rel.Name, waitingCS("ErrImagePull", `failed to pull and unpack image "registry.invalid/web:2": not found`, 0))
	c := f.degraded(rel.Name, "ImagePullFailed", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	t.Logf("Degraded %.0f ms after the pod's status said ErrImagePull", float64(time.Since(start).Microseconds())/1000)
	require.Equal(t, sluicev1.ReasonImagePullFailed, c.Reason)
	require.Contains(t, c.Message, "pod web-1 container web image registry.invalid/web:2: ErrImagePull: failed to pull")
	require.Contains(t, c.Message, "not found")
	require.NotContains(t, c.Message, "web-x")

	f.setPod(p, corev1.ContainerStatus{Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}}})
	c = f.degraded(rel.Name, "cleared", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionFalse })
	require.Equal(t, sluicev1.ReasonSucceeded, c.Reason)
}

// Each stuck state gets its reason: a crash loop, then an unschedulable
// pod, then a missing ConfigMap.
func TestReleaseHealth_recordsEachReason(t *testing.T) {
	f, rel := healthFixture(t)
	ns := rel.Spec.TargetNamespace
	p := f.pod(ns, "web-1", rel.Name, waitingCS("CrashLoopBackOff", "back-off 10s restarting failed container", 2))
	c := f.degraded(rel.Name, "CrashLooping", func(c *metav1.Condition) bool { return c.Reason == sluicev1.ReasonCrashLooping })
	require.Contains(t, c.Message, "back-off 10s")

	f.setPod(p, waitingCS("CreateContainerConfigError", `configmap "web-config" not found`, 0))
	c = f.degraded(rel.Name, "CreateContainerConfigError", func(c *metav1.Condition) bool {
		return c.Reason == sluicev1.ReasonCreateContainerConfigError
	})
	require.Contains(t, c.Message, `configmap "web-config" not found`)

	require.NoError(t, f.c.Delete(ctx(t), p, client.GracePeriodSeconds(0)))
	pending := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-2", Namespace: ns, Labels: map[string]string{podhealth.InstanceLabel: rel.Name}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:2"}}}}
	require.NoError(t, f.c.Create(ctx(t), pending))
	pending.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
		Message: "0/3 nodes are available: 3 Insufficient memory."}}
	require.NoError(t, f.c.Status().Update(ctx(t), pending))
	c = f.degraded(rel.Name, "Unschedulable", func(c *metav1.Condition) bool { return c.Reason == sluicev1.ReasonUnschedulable })
	require.Contains(t, c.Message, "Insufficient memory")
}

// Idempotent: once the stuck pod is recorded, the kubelet flipping to
// ImagePullBackOff with a back-off message and a restart counting up
// write nothing, nor do passes with nothing new.
func TestReleaseHealth_noWriteWhenNothingChanged(t *testing.T) {
	f, rel := healthFixture(t)
	ns := rel.Spec.TargetNamespace
	p := f.pod(ns, "web-1", rel.Name, waitingCS("ErrImagePull", "rpc error: not found", 0))
	f.degraded(rel.Name, "ImagePullFailed", func(c *metav1.Condition) bool { return c.Reason == sluicev1.ReasonImagePullFailed })
	require.Eventually(t, func() bool {
		before := f.op.releaseClient.writes.Load()
		_, err := f.op.release.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rel)})
		return err == nil && f.op.releaseClient.writes.Load() == before
	}, waitFor, 20*time.Millisecond, "a pass finds nothing to write")

	before := f.op.releaseClient.writes.Load()
	for i := int32(1); i <= 3; i++ {
		f.setPod(p, waitingCS("ImagePullBackOff", `Back-off pulling image "registry.invalid/web:2"`, i))
	}
	// Wait until the operator's cache has the last pod status, then run
	// passes of our own: none writes.
	require.Eventually(t, func() bool {
		var cached corev1.Pod
		return f.op.mgr.GetCache().Get(ctx(t), client.ObjectKeyFromObject(p), &cached) == nil &&
			len(cached.Status.ContainerStatuses) == 1 && cached.Status.ContainerStatuses[0].RestartCount == 3
	}, waitFor, 10*time.Millisecond)
	for range 3 {
		_, err := f.op.release.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rel)})
		require.NoError(t, err)
	}
	require.Equal(t, before, f.op.releaseClient.writes.Load(), "the back-off and restarts wrote nothing")
	c := releaseCondition(f.getRelease(rel.Name), sluicev1.ConditionDegraded)
	require.Contains(t, c.Message, "rpc error: not found", "the registry's message is kept over the back-off notice")
}

// A kubelet's message can be long (a registry's whole answer): the
// condition keeps at most maxMessage bytes of it, cut on a rune boundary,
// and keeps it without writing again while it does not change.
func TestReleaseHealth_longMessagesAreTruncated(t *testing.T) {
	f, rel := healthFixture(t)
	long := "rpc error: " + strings.Repeat("déjà vu ", 600)
	f.pod(rel.Spec.TargetNamespace, "web-1", rel.Name, waitingCS("ErrImagePull", long, 0))
	c := f.degraded(rel.Name, "ImagePullFailed", func(c *metav1.Condition) bool { return c.Reason == sluicev1.ReasonImagePullFailed })
	require.LessOrEqual(t, len(c.Message), maxMessage)
	require.True(t, utf8.ValidString(c.Message))
	require.True(t, strings.HasSuffix(c.Message, "…"), c.Message)
	require.True(t, strings.HasPrefix(c.Message, "pod web-1 container web image registry.invalid/web:2: ErrImagePull: rpc error: déjà vu"), c.Message)

	require.Eventually(t, func() bool {
		before := f.op.releaseClient.writes.Load()
		_, err := f.op.release.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rel)})
		return err == nil && f.op.releaseClient.writes.Load() == before
	}, waitFor, 20*time.Millisecond, "a truncated message is not written again")
}

// An applier that waits for the pods (Helm's --wait) keeps its change
// Applying while a pod cannot pull its image: the Release is Degraded by
// that pod then, not only after the apply times out.
func TestReleaseHealth_aChangeStillApplyingIsDegradedByItsPods(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	f := newFixture(t)
	f.op = startOperator(t, f.ns, operatorConfig{applier: &testapplier.Applier{Client: env.Client, BeforeEffect: func(ctx context.Context, _ applier.Request) error {
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}}})
	rel := f.release("checkout", "prod", twoOf, nil, func(r *sluicev1.Release) { r.Spec.TargetNamespace = "checkout-" + f.ns })
	require.NoError(t, f.c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rel.Spec.TargetNamespace}}))
	cr := f.change(rel, twoOf)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:bob", sluicev1.DecisionApprove)
	f.phase(cr, sluicev1.PhaseApplying)

	f.pod(rel.Spec.TargetNamespace, "web-1", rel.Name, waitingCS("ImagePullBackOff", `Back-off pulling image "registry.invalid/web:2"`, 0))
	c := f.degraded(rel.Name, "ImagePullFailed while applying", func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	require.Equal(t, sluicev1.ReasonImagePullFailed, c.Reason)
	require.Empty(t, f.getRelease(rel.Name).Status.AppliedChange, "nothing was applied yet")
}
