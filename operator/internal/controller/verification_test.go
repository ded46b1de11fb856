package controller

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
	"github.com/sluice-gitops/sluice/operator/internal/verify"
)

// fixedMeasurer answers every query with one value, judged by the check's
// conditions as Prometheus' answer would be (the Prometheus client itself
// is tested against a real Prometheus in package verify). It counts the
// queries.
type fixedMeasurer struct {
	value float64
	// inconclusive makes every measurement inconclusive.
	inconclusive bool
	mu           sync.Mutex
	calls        int
}

func (m *fixedMeasurer) Measure(_ context.Context, _ string, check *sluicev1.MetricCheck, query string, now time.Time) sluicev1.Measurement {
	m.mu.Lock()
	m.calls++
	value := m.value
	m.mu.Unlock()
	c, _ := sluicev1.ParseComparison(check.SuccessCondition)
	phase := sluicev1.MeasurementFailed
	if c.Holds(value) {
		phase = sluicev1.MeasurementSuccessful
	}
	if m.inconclusive {
		phase = sluicev1.MeasurementInconclusive
	}
	return sluicev1.Measurement{Check: check.Name, Query: query, Value: strconv.FormatFloat(value, 'g', -1, 64), Phase: phase, Time: metav1.NewMicroTime(now)}
}

func (m *fixedMeasurer) set(value float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.value = value
}

func (m *fixedMeasurer) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.calls
}

// withVerification gives the change an error-rate check measured twice.
func withVerification() changeOpt {
	return func(c *sluicev1.ChangeRequest) {
		c.Spec.Verification = &sluicev1.VerificationSpec{PrometheusURL: "http://prometheus.invalid:9090", Checks: []sluicev1.MetricCheck{{
			Name: "error-rate", Query: `sum(rate(errors{namespace="{{ .Namespace }}"}[1m]))`, SuccessCondition: "result < 0.005",
			Interval: &metav1.Duration{Duration: 200 * time.Millisecond}, Count: 2,
		}}}
	}
}

// verifyFixture runs an operator whose verifications measure value, and
// approves a change with a verification of a release whose target
// namespace exists.
func verifyFixture(t *testing.T, value float64) (*fixture, *fixedMeasurer, *sluicev1.Release, *sluicev1.ChangeRequest) {
	return verifyFixtureWith(t, &fixedMeasurer{value: value})
}

// verifyFixtureWith is verifyFixture with the measurer m.
func verifyFixtureWith(t *testing.T, m *fixedMeasurer) (*fixture, *fixedMeasurer, *sluicev1.Release, *sluicev1.ChangeRequest) {
	f := newFixture(t)
	f.op = startOperator(t, f.ns, operatorConfig{applier: &testapplier.Applier{Client: env.Client}, measurer: m})
	rel := f.release("checkout", "prod", twoOf, nil, func(r *sluicev1.Release) { r.Spec.TargetNamespace = "checkout-" + f.ns })
	require.NoError(t, f.c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rel.Spec.TargetNamespace}}))
	cr := f.change(rel, twoOf, withVerification())
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:bob", sluicev1.DecisionApprove)
	return f, m, rel, cr
}

// inconclusive: c waits in Verifying for a person to settle it.
func inconclusive(c *sluicev1.ChangeRequest) bool {
	v := condition(c, sluicev1.ConditionVerified)
	return c.Status.Phase == sluicev1.PhaseVerifying && v != nil && v.Reason == sluicev1.ReasonInconclusive
}

// A good version: Applied, then Verifying, then Verified once both
// measurements passed; the measurements are the evidence in status, and
// the release records the change as applied once it is verified.
func TestVerification_goodVersionIsVerified(t *testing.T) {
	f, m, rel, cr := verifyFixture(t, 0.001)
	got := f.phase(cr, sluicev1.PhaseVerified)
	v := got.Status.Verification
	require.NotNil(t, v)
	require.Len(t, v.Measurements, 2)
	require.Equal(t, "0.001", v.Measurements[0].Value)
	require.Contains(t, v.Measurements[0].Query, `namespace="`+rel.Spec.TargetNamespace+`"`)
	require.NotNil(t, v.HealthyAt)
	require.NotNil(t, v.FinishedAt)
	require.GreaterOrEqual(t, v.Measurements[1].Time.Sub(v.Measurements[0].Time.Time), 200*time.Millisecond, "the second measurement waited an interval")
	require.Equal(t, metav1.ConditionTrue, condition(got, sluicev1.ConditionVerified).Status)
	require.Equal(t, metav1.ConditionTrue, condition(got, sluicev1.ConditionReady).Status)
	require.Equal(t, 2, m.count(), "one query per measurement")
	require.Eventually(t, func() bool { return f.getRelease(rel.Name).Status.AppliedChange == cr.Name }, waitFor, 50*time.Millisecond)
}

// A bad version fails its first measurement: VerificationFailed, with
// the value that failed it.
func TestVerification_badVersionFails(t *testing.T) {
	f, _, _, cr := verifyFixture(t, 0.05)
	got := f.phase(cr, sluicev1.PhaseVerificationFailed)
	require.Len(t, got.Status.Verification.Measurements, 1)
	c := condition(got, sluicev1.ConditionVerified)
	require.Equal(t, sluicev1.ReasonChecksFailed, c.Reason)
	require.Contains(t, c.Message, "value 0.05")
}

// Health comes first: a Deployment of the release that is not available
// keeps the change Verifying without a query; a pod of it in
// CrashLoopBackOff fails the verification at once. There is no kubelet:
// the test writes the statuses.
func TestVerification_crashLoopingPodFailsAtOnce(t *testing.T) {
	f, m, rel, cr := verifyFixture(t, 0.001)
	ns := rel.Spec.TargetNamespace
	labels := map[string]string{verify.InstanceLabel: rel.Name}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:2"}}}}},
	}
	require.NoError(t, f.c.Create(ctx(t), dep))
	got := f.eventually(cr, "verifying, waiting for health", func(c *sluicev1.ChangeRequest) bool {
		v := condition(c, sluicev1.ConditionVerified)
		return c.Status.Phase == sluicev1.PhaseVerifying && v != nil && v.Reason == sluicev1.ReasonVerifying && c.Status.Verification != nil && c.Status.Verification.HealthyAt == nil &&
			len(c.Status.Verification.Message) > 0
	})
	require.Contains(t, got.Status.Verification.Message, "waiting for health")
	require.Zero(t, m.count(), "no metric is queried before the release is healthy")

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "web:2"}}}}
	require.NoError(t, f.c.Create(ctx(t), pod))
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "web", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container"}}}}
	require.NoError(t, f.c.Status().Update(ctx(t), pod))

	got = f.phase(cr, sluicev1.PhaseVerificationFailed)
	c := condition(got, sluicev1.ConditionVerified)
	require.Equal(t, sluicev1.ReasonUnhealthy, c.Reason)
	require.Contains(t, c.Message, "CrashLoopBackOff")
	require.Zero(t, m.count())
}

// staleChange answers reads of one ChangeRequest with an older copy, as a
// cache that has not seen the last status write yet does.
type staleChange struct {
	client.Client
	stale *sluicev1.ChangeRequest
}

func (c staleChange) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if cr, ok := obj.(*sluicev1.ChangeRequest); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(cr)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// A pass on a cache that has not seen the last measurement yet does not
// measure again: it re-reads the change from the API server before a
// measurement and goes on from the stored one. (On a busy machine the
// cache lagged and a third query was made for two measurements.)
func TestVerification_aStaleCacheDoesNotMeasureAgain(t *testing.T) {
	f := newFixture(t)
	m := &fixedMeasurer{value: 0.001}
	op := startOperator(t, f.ns, operatorConfig{applier: &testapplier.Applier{Client: env.Client}, measurer: m})
	rel := f.release("checkout", "prod", twoOf, nil, func(r *sluicev1.Release) { r.Spec.TargetNamespace = "checkout-" + f.ns })
	require.NoError(t, f.c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rel.Spec.TargetNamespace}}))
	// The second measurement is due an hour after the first.
	cr := f.change(rel, twoOf, withVerification(), func(c *sluicev1.ChangeRequest) {
		c.Spec.Verification.Checks[0].Interval = &metav1.Duration{Duration: time.Hour}
	})
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(cr, "k8s:bob", sluicev1.DecisionApprove)
	measured := f.eventually(cr, "one measurement stored", func(c *sluicev1.ChangeRequest) bool {
		return c.Status.Phase == sluicev1.PhaseVerifying && c.Status.Verification != nil && len(c.Status.Verification.Measurements) == 1
	})
	op.stop()
	require.Equal(t, 1, m.count())

	// The copy a lagging cache would hold: Verifying and healthy, no
	// measurement yet.
	stale := measured.DeepCopy()
	stale.ResourceVersion = "1"
	stale.Status.Verification.Measurements = nil
	stale.Status.Verification.Checks = nil
	quiet := startOperator(t, f.ns, operatorConfig{applier: &testapplier.Applier{Client: env.Client}, measurer: m, idle: true})
	r := *quiet.changes
	r.Client = staleChange{Client: quiet.client, stale: stale}
	_, err := r.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
	require.NoError(t, err)
	require.Equal(t, 1, m.count(), "the stale pass queried Prometheus again")
	require.Len(t, f.get(cr).Status.Verification.Measurements, 1)
}

// An inconclusive measurement stops the verification for a person: the
// change stays Verifying. A settle from someone the rule does not allow
// is named and does not count; an allowed approver's verify-fail ends it
// VerificationFailed, recording who settled it and why.
func TestVerification_inconclusiveIsSettledByAnAllowedApprover(t *testing.T) {
	f, m, _, cr := verifyFixtureWith(t, &fixedMeasurer{value: 0.001, inconclusive: true})
	got := f.eventually(cr, "verifying, inconclusive", inconclusive)
	require.Contains(t, condition(got, sluicev1.ConditionVerified).Message, "a person decides")
	require.Equal(t, 1, m.count(), "no more measurements while a person decides")

	f.decide(cr, "k8s:mallory", sluicev1.DecisionVerifyPass, func(a *sluicev1.Approval) { a.Spec.Comment = "trust me" })
	got = f.eventually(cr, "mallory's settle named as not counted", func(c *sluicev1.ChangeRequest) bool {
		return inconclusive(c) && strings.Contains(condition(c, sluicev1.ConditionVerified).Message, "k8s:mallory does not count")
	})
	require.Nil(t, got.Status.Verification.Settled)

	f.decide(cr, "k8s:alice", sluicev1.DecisionVerifyFail, func(a *sluicev1.Approval) { a.Spec.Comment = "latency doubled" })
	got = f.phase(cr, sluicev1.PhaseVerificationFailed)
	st := got.Status.Verification.Settled
	require.NotNil(t, st)
	require.Equal(t, sluicev1.Identity("k8s:alice"), st.Approver)
	require.Equal(t, sluicev1.DecisionVerifyFail, st.Decision)
	require.Equal(t, "latency doubled", st.Reason)
	c := condition(got, sluicev1.ConditionVerified)
	require.Equal(t, sluicev1.ReasonSettledFail, c.Reason)
	require.Contains(t, c.Message, "settled by k8s:alice: latency doubled")
	require.Equal(t, 1, m.count())
}

// DORA from verification, read from the registry: a release's change
// that fails verification counts in the change failure rate, and the
// next change of the release that is verified observes the time to
// restore.
func TestVerification_doraMetrics(t *testing.T) {
	f, m, rel, bad := verifyFixture(t, 0.05)
	reg := prometheus.NewRegistry()
	require.NoError(t, f.op.changes.Metrics.Register(reg))
	f.phase(bad, sluicev1.PhaseVerificationFailed)

	m.set(0.001)
	good := f.change(rel, twoOf, withVerification())
	f.decide(good, "k8s:alice", sluicev1.DecisionApprove)
	f.decide(good, "k8s:bob", sluicev1.DecisionApprove)
	f.phase(good, sluicev1.PhaseVerified)

	value := func(name string) (float64, uint64) {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, fam := range families {
			if fam.GetName() != name {
				continue
			}
			for _, mt := range fam.GetMetric() {
				for _, l := range mt.GetLabel() {
					if l.GetName() == "namespace" && l.GetValue() == f.ns {
						if h := mt.GetHistogram(); h != nil {
							return h.GetSampleSum(), h.GetSampleCount()
						}
						return mt.GetCounter().GetValue(), 0
					}
				}
			}
		}
		return 0, 0
	}
	require.Eventually(t, func() bool { _, n := value("sluice_time_to_restore_seconds"); return n == 1 }, waitFor, 50*time.Millisecond)
	applied, _ := value("sluice_release_changes_applied_total")
	failed, _ := value("sluice_release_changes_verification_failed_total")
	require.Equal(t, 2.0, applied)
	require.Equal(t, 1.0, failed, "change failure rate 1/2")
	restore, _ := value("sluice_time_to_restore_seconds")
	require.Greater(t, restore, 0.0)
}

// An allowed approver's verify-pass ends an inconclusive verification
// Verified, and the Release records the change as applied.
func TestVerification_inconclusiveSettledAsPassedIsVerified(t *testing.T) {
	f, _, rel, cr := verifyFixtureWith(t, &fixedMeasurer{value: 0.001, inconclusive: true})
	f.eventually(cr, "verifying, inconclusive", inconclusive)
	f.decide(cr, "k8s:bob", sluicev1.DecisionVerifyPass, func(a *sluicev1.Approval) { a.Spec.Comment = "no traffic at night" })
	got := f.phase(cr, sluicev1.PhaseVerified)
	require.Equal(t, sluicev1.ReasonSettledPass, condition(got, sluicev1.ConditionVerified).Reason)
	require.Equal(t, sluicev1.Identity("k8s:bob"), got.Status.Verification.Settled.Approver)
	require.NotNil(t, got.Status.Verification.FinishedAt)
	require.Eventually(t, func() bool { return f.getRelease(rel.Name).Status.AppliedChange == cr.Name }, waitFor, 50*time.Millisecond)
}
