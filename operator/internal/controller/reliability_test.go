package controller

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

var autoApprove = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveHigh}

func waitClosed(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitFor):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestChangeRequest_managerKilledDuringASlowApplyFinishesWithTheEffectOnce(t *testing.T) {
	f := newFixture(t)
	slow := newBlocker()
	first := &testapplier.Applier{Client: env.Client, BeforeEffect: slow.hook}
	op := startOperator(t, f.ns, operatorConfig{applier: first})
	rel := f.release("checkout", "staging", autoApprove, nil)
	cr := f.change(rel, autoApprove)
	waitClosed(t, slow.reached, "the applier to start")
	require.Equal(t, sluicev1.PhaseApplying, f.get(cr).Status.Phase, "Applying is stored before the applier runs")
	require.Equal(t, cr.Name, f.getRelease(rel.Name).Status.CurrentChange, "the lock is held before the applier runs")

	op.stop() // the operator dies mid-apply
	require.Equal(t, sluicev1.PhaseApplying, f.get(cr).Status.Phase)

	second := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: second})
	f.phase(cr, sluicev1.PhaseApplied)
	rec, ok := f.recorded(cr)
	require.True(t, ok)
	require.Equal(t, 1, rec.Effects, "the change's effect happened once")
	require.Equal(t, 1, first.Calls(cr.Name))
	require.Equal(t, 1, second.Calls(cr.Name))
	require.Eventually(t, func() bool { return f.getRelease(rel.Name).Status.CurrentChange == "" }, waitFor, 50*time.Millisecond)
}

func TestChangeRequest_managerKilledAfterTheEffectDoesNotApplyTwice(t *testing.T) {
	f := newFixture(t)
	stuck := newBlocker()
	first := &testapplier.Applier{Client: env.Client, AfterEffect: stuck.hook}
	op := startOperator(t, f.ns, operatorConfig{applier: first})
	rel := f.release("checkout", "staging", autoApprove, nil)
	cr := f.change(rel, autoApprove)
	waitClosed(t, stuck.reached, "the applier to record the effect")
	op.stop() // the effect happened, the status was never written

	require.Equal(t, sluicev1.PhaseApplying, f.get(cr).Status.Phase)
	second := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: second})
	got := f.phase(cr, sluicev1.PhaseApplied)
	rec, ok := f.recorded(cr)
	require.True(t, ok)
	require.Equal(t, 1, rec.Effects, "the applier was handed the change again and did not apply twice")
	require.Equal(t, rec.Message, got.Status.Apply.Message, "the recorded result is reported")
	require.Equal(t, 1, second.Calls(cr.Name))
}

func TestChangeRequest_statusConflictsAreRetried(t *testing.T) {
	f := newFixture(t)
	var crConflicts, relConflicts atomic.Int32
	conflict := func(obj client.Object) error {
		switch obj.(type) {
		case *sluicev1.ChangeRequest:
			if crConflicts.Add(1) <= 2 {
				return apierrors.NewConflict(schema.GroupResource{Group: sluicev1.GroupVersion.Group, Resource: "changerequests"}, obj.GetName(), errors.New("injected"))
			}
		case *sluicev1.Release:
			if relConflicts.Add(1) <= 2 {
				return apierrors.NewConflict(schema.GroupResource{Group: sluicev1.GroupVersion.Group, Resource: "releases"}, obj.GetName(), errors.New("injected"))
			}
		}
		return nil
	}
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta, failStatus: conflict})
	rel := f.release("checkout", "staging", autoApprove, nil)
	cr := f.change(rel, autoApprove)
	f.phase(cr, sluicev1.PhaseApplied)
	require.Greater(t, crConflicts.Load(), int32(2), "ChangeRequest status writes were retried after 409s")
	require.Greater(t, relConflicts.Load(), int32(2), "Release status writes were retried after 409s")
	rec, _ := f.recorded(cr)
	require.Equal(t, 1, rec.Effects)
}

// TestReconcile_aNoOpReconcileMakesZeroWrites: once a release and its
// changes have settled, reconciling them again writes nothing. The
// operator that brought them there is stopped first, so no pass of its own
// (a late event, a requeue) is counted; a second operator with a fresh
// cache and no controllers runs the counted passes.
func TestReconcile_aNoOpReconcileMakesZeroWrites(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	op := startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "prod", twoOf, nil)
	applied := f.change(rel, autoApprove, withRisk(sluicev1.RiskLow), func(c *sluicev1.ChangeRequest) {
		c.Spec.Rule = sluicev1.ApprovalRule{AutoApproveRisk: sluicev1.AutoApproveLow}
	})
	applied = f.phase(applied, sluicev1.PhaseApplied)
	// Changes are ordered by creation (second resolution): the second one
	// must be newer than the applied one.
	f.nextSecondAfter(applied.CreationTimestamp.Time)
	waiting := f.change(rel, twoOf)
	f.decide(waiting, "k8s:alice", sluicev1.DecisionApprove)
	f.waitingWith(waiting, "k8s:alice")
	// Settled: the Release summarises the waiting change (a summary the
	// operator writes SummaryDelay after the change's phase moved), and
	// the lock is free.
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		w := f.get(waiting)
		ready := meta.FindStatusCondition(r.Status.Conditions, sluicev1.ConditionReady)
		return r.Status.AppliedChange == applied.Name && r.Status.CurrentChange == "" && len(r.Status.History) == 1 && len(r.Finalizers) == 1 &&
			ready != nil && ready.Reason == changeReason(w) && ready.Message == fmt.Sprintf("the newest change %s is %s", w.Name, w.Status.Phase)
	}, waitFor, 50*time.Millisecond)
	op.stop()

	quiet := startOperator(t, f.ns, operatorConfig{applier: ta, idle: true})
	for range 3 {
		for _, cr := range []*sluicev1.ChangeRequest{applied, waiting} {
			_, err := quiet.changes.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
			require.NoError(t, err)
		}
		_, err := quiet.release.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rel)})
		require.NoError(t, err)
	}
	require.Zero(t, quiet.client.writes.Load(), "a no-op reconcile wrote to the API server")
}

func TestMetrics_countPhasesAppliesAndApprovalWait(t *testing.T) {
	for _, tc := range []struct {
		name     string
		conflict bool
	}{
		{"every write succeeds", false},
		{"the write of each decision fails once first", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			ta := &testapplier.Applier{Client: env.Client}
			cfg := operatorConfig{applier: ta}
			if tc.conflict {
				// The first write of each phase is refused, so the pass that
				// decided it runs again: the metrics must still count once.
				seen := map[sluicev1.ChangeRequestPhase]bool{}
				var mu sync.Mutex
				cfg.failStatus = func(obj client.Object) error {
					cr, ok := obj.(*sluicev1.ChangeRequest)
					if !ok {
						return nil
					}
					mu.Lock()
					defer mu.Unlock()
					if seen[cr.Status.Phase] {
						return nil
					}
					seen[cr.Status.Phase] = true
					return apierrors.NewConflict(schema.GroupResource{Group: sluicev1.GroupVersion.Group, Resource: "changerequests"}, obj.GetName(), errors.New("injected"))
				}
			}
			op := startOperator(t, f.ns, cfg)
			reg := prometheus.NewRegistry()
			require.NoError(t, op.changes.Metrics.Register(reg))
			rel := f.release("checkout", "staging", autoApprove, nil)
			cr := f.change(rel, autoApprove)
			f.phase(cr, sluicev1.PhaseApplied)

			// The gauge counts from the operator's cache and the transition
			// counter is bumped after the status write returns, so both may
			// trail the API server's Applied by a moment: wait for them.
			require.EventuallyWithT(t, func(c *assert.CollectT) {
				values := gather(c, reg)
				assert.Equal(c, 1.0, values["sluice_changes_applied_total,applier=test"], "%v", values)
				assert.Equal(c, 1.0, values["sluice_apply_duration_seconds,applier=test,result=applied"], "%v", values)
				assert.Equal(c, 1.0, values["sluice_approval_wait_seconds"], "%v", values)
				assert.Equal(c, 1.0, values["sluice_changerequest_transitions_total,phase=Applied"], "%v", values)
				assert.Equal(c, 1.0, values["sluice_changerequests,namespace="+f.ns+",phase=Applied"], "%v", values)
			}, waitFor, 50*time.Millisecond)
		})
	}
}

// gather reads every metric of reg into name[,label=value...] → value
// (a histogram's sample count).
func gather(c *assert.CollectT, reg *prometheus.Registry) map[string]float64 {
	values := map[string]float64{}
	families, err := reg.Gather()
	if !assert.NoError(c, err) {
		return values
	}
	for _, mf := range families {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			switch {
			case m.Counter != nil:
				values[key] = m.GetCounter().GetValue()
			case m.Gauge != nil:
				values[key] = m.GetGauge().GetValue()
			case m.Histogram != nil:
				values[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return values
}

// TestTracing_theApplyContinuesTheTraceOfTheSyncThatMadeTheChange: the
// syncer's traceparent annotation is the parent of the approval and apply
// spans.
func TestTracing_theApplyContinuesTheTraceOfTheSyncThatMadeTheChange(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "staging", autoApprove, nil)
	const traceID, syncSpan = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
	cr := f.change(rel, autoApprove, func(c *sluicev1.ChangeRequest) {
		c.Annotations = map[string]string{tracing.Annotation: "00-" + traceID + "-" + syncSpan + "-01"}
	})
	f.phase(cr, sluicev1.PhaseApplied)

	found := map[string]bool{}
	for _, s := range spans.GetSpans() {
		if s.SpanContext.TraceID().String() != traceID {
			continue
		}
		require.Equal(t, syncSpan, s.Parent.SpanID().String(), "%s continues the sync's span", s.Name)
		found[s.Name] = true
	}
	require.True(t, found["sluice.approved"], "the approval is in the trace: %v", found)
	require.True(t, found["sluice.apply"], "the apply is in the trace: %v", found)
}
