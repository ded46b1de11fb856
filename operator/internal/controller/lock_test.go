package controller

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// lineApplier applies nothing and records, per release, the order of the
// applies and how many ran at once.
type lineApplier struct {
	mu          sync.Mutex
	inFlight    map[string]int
	maxInFlight int
	order       []string
}

func (a *lineApplier) Name() string { return "line" }

func (a *lineApplier) Apply(_ context.Context, req applier.Request) (applier.Result, error) {
	a.mu.Lock()
	a.inFlight[req.Release.Name]++
	a.maxInFlight = max(a.maxInFlight, a.inFlight[req.Release.Name])
	a.order = append(a.order, req.Change.Name)
	a.mu.Unlock()
	// Widen the window in which a second apply of the release could start.
	time.Sleep(20 * time.Millisecond)
	a.mu.Lock()
	a.inFlight[req.Release.Name]--
	a.mu.Unlock()
	return applier.Result{Message: "applied"}, nil
}

// TestLock_changesApprovedTogetherApplyOneAtATimeInLineWithoutPolling: six
// auto-approved changes of a release created at once are applied one at a
// time, oldest first (or superseded by a newer one), with the lock handed
// from one to the next by the Release reconciler: no ChangeRequest
// reconcile ends in a RequeueAfter (nothing polls the lock), and a change
// makes at most three status writes of its own (Approved, Applying,
// Applied; the first takes the free lock itself instead of writing
// Approved) and one write of the Release that hands it the lock: four in
// all, plus the hand-back after the last and one summary of the Release.
func TestLock_changesApprovedTogetherApplyOneAtATimeInLineWithoutPolling(t *testing.T) {
	f := newFixture(t)
	la := &lineApplier{inFlight: map[string]int{}}
	op := startOperator(t, f.ns, operatorConfig{applier: la, concurrency: 4})
	// Count the writes that were stored (a write that lost a race is no
	// write): every update of a ChangeRequest or a Release here is the
	// operator's.
	var stored, lastSeen sync.Map
	for _, obj := range []client.Object{&sluicev1.ChangeRequest{}, &sluicev1.Release{}} {
		inf, err := op.mgr.GetCache().GetInformer(ctx(t), obj)
		require.NoError(t, err)
		_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{UpdateFunc: func(o, n any) {
			if o.(client.Object).GetResourceVersion() != n.(client.Object).GetResourceVersion() {
				c, _ := stored.LoadOrStore(fmt.Sprintf("%T", n), new(atomic.Int64))
				c.(*atomic.Int64).Add(1)
			}
			lastSeen.Store(client.ObjectKeyFromObject(n.(client.Object)), n.(client.Object).GetResourceVersion())
		}})
		require.NoError(t, err)
	}
	count := func(obj client.Object) int64 {
		c, ok := stored.Load(fmt.Sprintf("%T", obj))
		if !ok {
			return 0
		}
		return c.(*atomic.Int64).Load()
	}
	rel := f.release("checkout", "staging", autoApprove, nil)
	// The Release's own set-up is not counted: its writes are done, and
	// the counting handler has been handed the last of them (it may trail
	// the API server on a busy machine).
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		rv, _ := lastSeen.Load(client.ObjectKeyFromObject(r))
		return len(r.Finalizers) == 1 && r.Status.ObservedGeneration == r.Generation && rv == r.ResourceVersion
	}, waitFor, 50*time.Millisecond)
	changeWrites, releaseWrites := count(&sluicev1.ChangeRequest{}), count(&sluicev1.Release{})
	requeues := reconcileCount(t, "changerequest", "requeue_after")

	const n = 6
	var changes []*sluicev1.ChangeRequest
	for range n {
		changes = append(changes, f.change(rel, autoApprove))
	}
	var applied []string
	for _, cr := range changes {
		got := f.eventually(cr, "terminal", func(c *sluicev1.ChangeRequest) bool { return c.Status.Phase.IsTerminal() })
		require.Contains(t, []sluicev1.ChangeRequestPhase{sluicev1.PhaseApplied, sluicev1.PhaseSuperseded}, got.Status.Phase, describe(got))
		if got.Status.Phase == sluicev1.PhaseApplied {
			applied = append(applied, got.Name)
		}
	}
	require.NotEmpty(t, applied)
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		return r.Status.CurrentChange == "" && r.Status.AppliedChange == applied[len(applied)-1]
	}, waitFor, 50*time.Millisecond, "the last change applied is recorded and the lock handed back")

	la.mu.Lock()
	defer la.mu.Unlock()
	require.Equal(t, 1, la.maxInFlight, "two changes of the release were applied at once")
	require.ElementsMatch(t, applied, la.order, "each applied change was applied once")
	// The first change to find the lock free takes it, and which of the
	// changes approved together gets there first is up to the scheduler
	// (on a busy machine not always the oldest); every later one is handed
	// the lock in line, oldest first.
	require.True(t, slices.IsSortedFunc(la.order[1:], func(a, b string) int {
		ia := slices.IndexFunc(changes, func(c *sluicev1.ChangeRequest) bool { return c.Name == a })
		ib := slices.IndexFunc(changes, func(c *sluicev1.ChangeRequest) bool { return c.Name == b })
		return ia - ib
	}), "handed the lock in line after the first: %v", la.order)
	require.Zero(t, reconcileCount(t, "changerequest", "requeue_after")-requeues, "a ChangeRequest reconcile polled")
	// The counts are read once the operator's cache has seen the last write.
	require.Eventually(t, func() bool {
		r := &sluicev1.Release{}
		require.NoError(t, op.mgr.GetCache().Get(ctx(t), client.ObjectKeyFromObject(rel), r))
		return r.Status.CurrentChange == "" && r.Status.AppliedChange == applied[len(applied)-1]
	}, waitFor, 50*time.Millisecond)
	changeWrites, releaseWrites = count(&sluicev1.ChangeRequest{})-changeWrites, count(&sluicev1.Release{})-releaseWrites
	t.Logf("%d changes, %d applied: %d ChangeRequest writes, %d Release writes", n, len(applied), changeWrites, releaseWrites)
	require.LessOrEqual(t, changeWrites, int64(3*n), "ChangeRequest writes")
	// Each applied change is handed the lock once; beyond four writes per
	// change, the release takes the hand-back after the last and one
	// summary of its own (the Ready of the newest change, a superseded
	// change in its history).
	require.LessOrEqual(t, changeWrites+releaseWrites, int64(4*n+2), "writes for %d changes", n)
}

// heldApplier blocks each apply until released, after telling entered
// (the first).
type heldApplier struct {
	entered chan string
	release chan struct{}
}

func (a *heldApplier) Name() string { return "held" }

func (a *heldApplier) Apply(ctx context.Context, req applier.Request) (applier.Result, error) {
	select {
	case a.entered <- req.Change.Name:
	default: // only the first apply is awaited; a repeat must not hang
	}
	select {
	case <-a.release:
	case <-ctx.Done():
		return applier.Result{}, ctx.Err()
	}
	return applier.Result{Message: "applied"}, nil
}

// TestLock_theLockWriteCarriesTheSummaryOfTheHold: the change that takes
// a free lock writes the Release's Progressing and Ready of the hold in
// the same write, so the Release says the change holds the lock as soon
// as its apply starts (not SummaryDelay later in a write of its own), and
// the Release reconciler's pass during the hold finds nothing to write.
func TestLock_theLockWriteCarriesTheSummaryOfTheHold(t *testing.T) {
	f := newFixture(t)
	ha := &heldApplier{entered: make(chan string, 1), release: make(chan struct{})}
	op := startOperator(t, f.ns, operatorConfig{applier: ha})
	rel := f.release("checkout", "staging", autoApprove, nil)
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		return len(r.Finalizers) == 1 && r.Status.ObservedGeneration == r.Generation
	}, waitFor, 50*time.Millisecond, "the Release's set-up")

	cr := f.change(rel, autoApprove)
	var applying string
	select {
	case applying = <-ha.entered:
	case <-time.After(waitFor):
		t.Fatalf("the change was never handed to the applier: %s", describe(f.get(cr)))
	}
	require.Equal(t, cr.Name, applying)
	held := f.getRelease(rel.Name)
	require.Equal(t, cr.Name, held.Status.CurrentChange)
	progressing := meta.FindStatusCondition(held.Status.Conditions, sluicev1.ConditionProgressing)
	ready := meta.FindStatusCondition(held.Status.Conditions, sluicev1.ConditionReady)
	require.NotNil(t, progressing)
	require.NotNil(t, ready)
	require.Equal(t, cr.Name+" holds the apply lock", progressing.Message, "Progressing of the hold, written with the lock")
	require.Equal(t, "the newest change "+cr.Name+" holds the apply lock", ready.Message, "Ready of the hold, written with the lock")
	require.Equal(t, sluicev1.ReasonApplying, ready.Reason)

	// The Release reconciler's passes during the hold (the change's
	// Applying, the lock write itself) write nothing, once its cache has
	// the hold.
	require.Eventually(t, func() bool {
		r, c := &sluicev1.Release{}, &sluicev1.ChangeRequest{}
		require.NoError(t, op.mgr.GetCache().Get(ctx(t), client.ObjectKeyFromObject(rel), r))
		require.NoError(t, op.mgr.GetCache().Get(ctx(t), client.ObjectKeyFromObject(cr), c))
		return r.ResourceVersion == held.ResourceVersion && c.Status.Phase == sluicev1.PhaseApplying
	}, waitFor, 50*time.Millisecond, "the cache has the hold")
	before := op.releaseClient.writes.Load()
	for range 3 {
		_, err := op.release.Reconcile(ctx(t), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(rel)})
		require.NoError(t, err)
	}
	require.Equal(t, before, op.releaseClient.writes.Load(), "a Release pass during the hold wrote")

	close(ha.release)
	f.eventually(cr, "Applied", func(c *sluicev1.ChangeRequest) bool { return c.Status.Phase == sluicev1.PhaseApplied })
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		ready := meta.FindStatusCondition(r.Status.Conditions, sluicev1.ConditionReady)
		return r.Status.CurrentChange == "" && ready != nil && ready.Status == metav1.ConditionTrue
	}, waitFor, 50*time.Millisecond, "the lock handed back and the Release Ready")
}
