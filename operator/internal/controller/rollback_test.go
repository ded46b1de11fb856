package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

// revisionMeasurer answers a query with a bad value when it names a bad
// revision (the checks' queries carry {{ .Revision }}), a good one
// otherwise; a revision in hold waits until its channel is closed.
type revisionMeasurer struct {
	mu   sync.Mutex
	bad  map[string]bool
	hold map[string]chan struct{}
}

func (m *revisionMeasurer) Measure(ctx context.Context, url string, check *sluicev1.MetricCheck, query string, now time.Time) sluicev1.Measurement {
	m.mu.Lock()
	value := 0.001
	var wait chan struct{}
	for rev := range m.bad {
		if strings.Contains(query, rev) {
			value = 0.05
		}
	}
	for rev, ch := range m.hold {
		if strings.Contains(query, rev) {
			wait = ch
		}
	}
	m.mu.Unlock()
	if wait != nil {
		select {
		case <-wait:
		case <-ctx.Done():
		}
	}
	return (&fixedMeasurer{value: value}).Measure(ctx, url, check, query, now)
}

// withRevisionCheck gives the change an error-rate check whose query
// names its revision, measured once.
func withRevisionCheck() changeOpt {
	return func(c *sluicev1.ChangeRequest) {
		c.Spec.Verification = &sluicev1.VerificationSpec{PrometheusURL: "http://prometheus.invalid:9090", Checks: []sluicev1.MetricCheck{{
			Name: "error-rate", Query: `sum(rate(errors{revision="{{ .Revision }}"}[1m]))`, SuccessCondition: "result < 0.005", Count: 1,
		}}}
	}
}

// rollbackFixture runs an operator whose verifications fail for the
// revisions marked bad, with a release whose changes auto-approve.
func rollbackFixture(t *testing.T) (*fixture, *revisionMeasurer, *sluicev1.Release) {
	f := newFixture(t)
	m := &revisionMeasurer{bad: map[string]bool{}, hold: map[string]chan struct{}{}}
	f.op = startOperator(t, f.ns, operatorConfig{applier: &testapplier.Applier{Client: env.Client}, measurer: m})
	rel := f.release("checkout", "prod", pushersRule, nil, func(r *sluicev1.Release) { r.Spec.TargetNamespace = "checkout-" + f.ns })
	require.NoError(t, f.c.Create(ctx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: rel.Spec.TargetNamespace}}))
	return f, m, rel
}

// badChange marks the next revision bad before its change is created.
func (f *fixture) badChange(m *revisionMeasurer, rel *sluicev1.Release, opts ...changeOpt) *sluicev1.ChangeRequest {
	return f.change(rel, pushersRule, append([]changeOpt{withRevisionCheck(), func(c *sluicev1.ChangeRequest) {
		m.mu.Lock()
		m.bad[c.Spec.Revision] = true
		m.mu.Unlock()
	}}, opts...)...)
}

// releaseWhen waits until the Release satisfies cond.
func (f *fixture) releaseWhen(name, what string, cond func(*sluicev1.Release) bool) *sluicev1.Release {
	f.t.Helper()
	var rel *sluicev1.Release
	require.Eventually(f.t, func() bool {
		rel = f.getRelease(name)
		return cond(rel)
	}, waitFor, 20*time.Millisecond, "Release %s: %s", name, what)
	return rel
}

// A change that verifies becomes lastVerified; the next one fails: it is
// quarantined, the decision (a rollback to the verified change) is in
// status with RolledBack=True, and the annotation asks the syncer for it.
// A second pass writes nothing.
func TestRollback_failedChangeAsksForARollbackToTheLastVerified(t *testing.T) {
	f, m, rel := rollbackFixture(t)
	v1 := f.change(rel, pushersRule, withRevisionCheck())
	f.phase(v1, sluicev1.PhaseVerified)
	f.releaseWhen(rel.Name, "v1 is the last verified change", func(r *sluicev1.Release) bool {
		return r.Status.LastVerified != nil && r.Status.LastVerified.ChangeRequest == v1.Name
	})
	v2 := f.badChange(m, rel)
	f.phase(v2, sluicev1.PhaseVerificationFailed)
	got := f.releaseWhen(rel.Name, "a rollback of v2 is requested", func(r *sluicev1.Release) bool {
		return r.Annotations[sluicev1.RollbackAnnotation(v2.Name)] != ""
	})
	require.Equal(t, v1.Name, got.Annotations[sluicev1.RollbackAnnotation(v2.Name)])
	d := got.Status.Rollback
	require.NotNil(t, d)
	require.Equal(t, sluicev1.RollbackDecision{Of: v2.Name, To: v1.Name, Requested: true, Reason: sluicev1.ReasonRollbackRequested, Message: d.Message, DecidedAt: d.DecidedAt}, *d)
	require.Contains(t, d.Message, "ChecksFailed")
	require.Len(t, got.Status.Quarantine, 1)
	require.Equal(t, v2.Name, got.Status.Quarantine[0].ChangeRequest)
	require.Equal(t, f.get(v2).Spec.ApprovalDigest, got.Status.Quarantine[0].ApprovalDigest)
	require.Equal(t, v2.Spec.ContentDigest, got.Status.Quarantine[0].ContentDigest)
	require.Equal(t, v1.Name, got.Status.LastVerified.ChangeRequest)
	c := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionRolledBack)
	require.NotNil(t, c)
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, sluicev1.ReasonRollbackRequested, c.Reason)

	// Idempotent: a pass over the same state writes nothing.
	f.op.stop()
	quiet := startOperator(t, f.ns, operatorConfig{idle: true})
	before := quiet.releaseClient.writes.Load()
	_, err := quiet.release.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rel)})
	require.NoError(t, err)
	require.Equal(t, before, quiet.releaseClient.writes.Load(), "a pass with nothing to do wrote")
	require.Equal(t, *d, *f.getRelease(rel.Name).Status.Rollback)
}

// A decision stored in status whose annotation was never written (the
// operator stopped between the two writes) gets its annotation at the
// next pass, and the decision stays the one taken.
func TestRollback_aRestartBetweenStatusAndAnnotationWritesTheAnnotationOnly(t *testing.T) {
	f, m, rel := rollbackFixture(t)
	v1 := f.change(rel, pushersRule, withRevisionCheck())
	f.phase(v1, sluicev1.PhaseVerified)
	f.releaseWhen(rel.Name, "v1 verified", func(r *sluicev1.Release) bool { return r.Status.LastVerified != nil })
	v2 := f.badChange(m, rel)
	f.phase(v2, sluicev1.PhaseVerificationFailed)
	decided := f.releaseWhen(rel.Name, "requested", func(r *sluicev1.Release) bool {
		return r.Annotations[sluicev1.RollbackAnnotation(v2.Name)] != ""
	})
	f.op.stop()
	// Take the annotation away, as if it had never been written.
	orig := decided.DeepCopy()
	delete(decided.Annotations, sluicev1.RollbackAnnotation(v2.Name))
	require.NoError(t, f.c.Patch(ctx(t), decided, client.MergeFrom(orig)))

	quiet := startOperator(t, f.ns, operatorConfig{idle: true})
	require.Eventually(t, func() bool {
		r := &sluicev1.Release{}
		return quiet.mgr.GetCache().Get(ctx(t), client.ObjectKeyFromObject(rel), r) == nil && r.Annotations[sluicev1.RollbackAnnotation(v2.Name)] == ""
	}, waitFor, 20*time.Millisecond)
	_, err := quiet.release.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rel)})
	require.NoError(t, err)
	got := f.getRelease(rel.Name)
	require.Equal(t, v1.Name, got.Annotations[sluicev1.RollbackAnnotation(v2.Name)])
	require.Equal(t, *decided.Status.Rollback, *got.Status.Rollback, "decided twice")
}

// No rollback when nothing was ever verified, of a rollback, or while a
// newer change waits: RolledBack=False with the reason, no annotation.
func TestRollback_declinedDecisionsSayWhy(t *testing.T) {
	rolledBack := func(f *fixture, rel *sluicev1.Release, of string) *sluicev1.Release {
		return f.releaseWhen(rel.Name, "decided on "+of, func(r *sluicev1.Release) bool {
			return r.Status.Rollback != nil && r.Status.Rollback.Of == of
		})
	}
	check := func(t *testing.T, got *sluicev1.Release, reason string) {
		t.Helper()
		require.Equal(t, reason, got.Status.Rollback.Reason)
		require.False(t, got.Status.Rollback.Requested)
		require.Empty(t, got.Status.Rollback.To)
		c := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionRolledBack)
		require.NotNil(t, c)
		require.Equal(t, metav1.ConditionFalse, c.Status)
		require.Equal(t, reason, c.Reason)
		for k := range got.Annotations {
			require.False(t, strings.HasPrefix(k, sluicev1.AnnotationRollbackPrefix), "annotation %s", k)
		}
	}
	t.Run("nothing verified", func(t *testing.T) {
		f, m, rel := rollbackFixture(t)
		v1 := f.badChange(m, rel)
		f.phase(v1, sluicev1.PhaseVerificationFailed)
		got := rolledBack(f, rel, v1.Name)
		check(t, got, sluicev1.ReasonNothingVerified)
		require.Len(t, got.Status.Quarantine, 1)
	})
	t.Run("a rollback that fails", func(t *testing.T) {
		f, m, rel := rollbackFixture(t)
		v1 := f.change(rel, pushersRule, withRevisionCheck())
		f.phase(v1, sluicev1.PhaseVerified)
		rb := f.badChange(m, rel, func(c *sluicev1.ChangeRequest) {
			c.Spec.Rollback = &sluicev1.RollbackSpec{Of: rel.Name + "-0000000000", To: v1.Name}
		})
		f.phase(rb, sluicev1.PhaseVerificationFailed)
		check(t, rolledBack(f, rel, rb.Name), sluicev1.ReasonRollbackOfRollback)
	})
	t.Run("a newer change waits", func(t *testing.T) {
		f, m, rel := rollbackFixture(t)
		v1 := f.change(rel, pushersRule, withRevisionCheck())
		f.phase(v1, sluicev1.PhaseVerified)
		release := make(chan struct{})
		v2 := f.badChange(m, rel, func(c *sluicev1.ChangeRequest) {
			m.mu.Lock()
			m.hold[c.Spec.Revision] = release
			m.mu.Unlock()
		})
		f.phase(v2, sluicev1.PhaseVerifying)
		f.nextSecondAfter(f.get(v2).CreationTimestamp.Time)
		v3 := f.change(rel, pushersRule, withRevisionCheck())
		f.phase(v3, sluicev1.PhaseApproved)
		close(release)
		f.phase(v2, sluicev1.PhaseVerificationFailed)
		got := rolledBack(f, rel, v2.Name)
		check(t, got, sluicev1.ReasonNewerChange)
		require.Contains(t, got.Status.Rollback.Message, v3.Name)
	})
}
