package reconcile_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

const owner = "runtime-test"

// widgetScope is the state of one pass over a Widget in these tests.
type widgetScope struct {
	w     *Widget
	patch *reconcile.Helper[*Widget]
	ready reconcile.Ready
}

// widgetReconciler is a reconciler written with the runtime, as the
// package documentation shows: a table of steps, one write per pass, a
// restart on a lost race.
type widgetReconciler struct {
	c      client.Client
	reader client.Reader
	steps  []reconcile.Step[*widgetScope]
	// beforeWrite, when set, runs between the steps and the write (a
	// concurrent writer, in the conflict test).
	beforeWrite func(ctx context.Context, w *Widget)
	passes      int
}

func (r *widgetReconciler) Reconcile(ctx context.Context, key client.ObjectKey) (ctrl.Result, error) {
	w := &Widget{}
	if err := r.c.Get(ctx, key, w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	return reconcile.Loop(ctx, w, r.pass)
}

func (r *widgetReconciler) pass(ctx context.Context, w *Widget) reconcile.Result {
	r.passes++
	s := &widgetScope{w: w, patch: reconcile.NewHelper(r.c, w, owner)}
	res := reconcile.RunSteps(ctx, s, r.steps)
	if res.Is(reconcile.KindRestart) {
		return res
	}
	summaryOf(w).Conclude(res, s.ready)
	if r.beforeWrite != nil {
		r.beforeWrite(ctx, w)
	}
	_, err := s.patch.Patch(ctx, w)
	return reconcile.Settle(ctx, r.reader, w, res, err)
}

func summaryOf(w *Widget) reconcile.Summary {
	return reconcile.Summary{Conditions: &w.Status.Conditions, ObservedGeneration: &w.Status.ObservedGeneration, Generation: w.Generation}
}

// noteStep sets status.note to the spec's size and Ready True.
func noteStep(_ context.Context, s *widgetScope) reconcile.Result {
	s.w.Status.Note = fmt.Sprintf("size %d", s.w.Spec.Size)
	s.ready = reconcile.Ready{Status: metav1.ConditionTrue, Reason: "Sized", Message: s.w.Status.Note}
	return reconcile.Next()
}

func newWidget(t *testing.T, c client.Client) *Widget {
	t.Helper()
	ns := "default"
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: strings.ToLower(strings.ReplaceAll(t.Name(), "_", "-"))}, Spec: WidgetSpec{Size: 1}}
	w.Name = strings.ReplaceAll(w.Name, "/", "-")
	if err := c.Create(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), w) })
	return w
}

func get(t *testing.T, c client.Client, w *Widget) *Widget {
	t.Helper()
	out := &Widget{}
	if err := c.Get(context.Background(), client.ObjectKeyFromObject(w), out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHelper_aPassWritesStatusOnceWithObservedGenerationAndReady(t *testing.T) {
	c := newClient(t)
	w := newWidget(t, c)
	r := &widgetReconciler{c: c, reader: c, steps: []reconcile.Step[*widgetScope]{
		{Name: "note", Run: noteStep},
		{Name: "count", Run: func(_ context.Context, s *widgetScope) reconcile.Result { s.w.Status.Count++; return reconcile.Next() }},
	}}
	res, err := r.Reconcile(context.Background(), client.ObjectKeyFromObject(w))
	if err != nil || res != (ctrl.Result{}) {
		t.Fatalf("Reconcile = %v, %v; want a quiet end", res, err)
	}
	if n := c.patches.Load(); n != 1 {
		t.Fatalf("status writes = %d, want 1 for the whole pass", n)
	}
	got := get(t, c, w)
	if got.Status.Note != "size 1" || got.Status.Count != 1 || got.Status.ObservedGeneration != got.Generation {
		t.Fatalf("status = %+v, want note, count and observedGeneration %d", got.Status, got.Generation)
	}
	if !meta.IsStatusConditionTrue(got.Status.Conditions, reconcile.ConditionReady) {
		t.Fatalf("Ready not True: %+v", got.Status.Conditions)
	}
}

func TestHelper_aNoOpPassWritesNothing(t *testing.T) {
	c := newClient(t)
	w := newWidget(t, c)
	r := &widgetReconciler{c: c, reader: c, steps: []reconcile.Step[*widgetScope]{{Name: "note", Run: noteStep}}}
	if _, err := r.Reconcile(context.Background(), client.ObjectKeyFromObject(w)); err != nil {
		t.Fatal(err)
	}
	before := get(t, c, w)
	c.patches.Store(0)
	for range 3 {
		if _, err := r.Reconcile(context.Background(), client.ObjectKeyFromObject(w)); err != nil {
			t.Fatal(err)
		}
	}
	if n := c.patches.Load(); n != 0 {
		t.Fatalf("status writes = %d after passes that changed nothing, want 0", n)
	}
	if after := get(t, c, w); after.ResourceVersion != before.ResourceVersion {
		t.Fatalf("resourceVersion moved %s → %s on no-op passes", before.ResourceVersion, after.ResourceVersion)
	}
}

func TestHelper_aFailedPassKeepsObservedGenerationButWritesWhatItFound(t *testing.T) {
	c := newClient(t)
	w := newWidget(t, c)
	ok := &widgetReconciler{c: c, reader: c, steps: []reconcile.Step[*widgetScope]{{Name: "note", Run: noteStep}}}
	if _, err := ok.Reconcile(context.Background(), client.ObjectKeyFromObject(w)); err != nil {
		t.Fatal(err)
	}
	// A new generation whose pass fails after a step found something.
	cur := get(t, c, w)
	cur.Spec.Size = 2
	if err := c.Update(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	failing := &widgetReconciler{c: c, reader: c, steps: []reconcile.Step[*widgetScope]{
		{Name: "note", Run: noteStep},
		{Name: "fail", Run: func(context.Context, *widgetScope) reconcile.Result { return reconcile.Failure(boom) }},
		{Name: "never", Run: func(context.Context, *widgetScope) reconcile.Result {
			t.Fatal("a step after a Failure ran")
			return reconcile.Next()
		}},
	}}
	_, err := failing.Reconcile(context.Background(), client.ObjectKeyFromObject(w))
	if !errors.Is(err, boom) {
		t.Fatalf("Reconcile error = %v, want boom", err)
	}
	got := get(t, c, w)
	if got.Generation != 2 || got.Status.ObservedGeneration != 1 {
		t.Fatalf("generation %d, observedGeneration %d: a failed pass must not observe the new generation", got.Generation, got.Status.ObservedGeneration)
	}
	if got.Status.Note != "size 2" {
		t.Fatalf("note = %q: what the pass found is still written", got.Status.Note)
	}
	if c := meta.FindStatusCondition(got.Status.Conditions, reconcile.ConditionReady); c == nil || c.Message != "size 1" {
		t.Fatalf("Ready = %+v, want the summary of generation 1 kept", c)
	}
}

func TestHelper_aConcurrentWriteIsAConflictNotOverwritten(t *testing.T) {
	c := newClient(t)
	other := newClient(t)
	w := newWidget(t, c)
	cur := get(t, c, w)
	h := reconcile.NewHelper(c, cur, owner)
	cur.Status.Note = "mine"

	theirs := get(t, other, w)
	theirs.Status.Count = 7
	if err := other.Status().Update(context.Background(), theirs); err != nil {
		t.Fatal(err)
	}
	wrote, err := h.Patch(context.Background(), cur)
	if wrote || !apierrors.IsConflict(err) {
		t.Fatalf("Patch = %v, %v; want a conflict", wrote, err)
	}
	if got := get(t, c, w); got.Status.Count != 7 || got.Status.Note != "" {
		t.Fatalf("status = %+v: the other writer's status must stand", got.Status)
	}
}

func TestLoop_aPassThatLostARaceRunsAgainOnAFreshCopy(t *testing.T) {
	c := newClient(t)
	other := newClient(t)
	w := newWidget(t, c)
	raced := false
	r := &widgetReconciler{c: c, reader: c, steps: []reconcile.Step[*widgetScope]{{Name: "note", Run: noteStep}}}
	r.beforeWrite = func(ctx context.Context, _ *Widget) {
		if raced {
			return
		}
		raced = true
		theirs := get(t, other, w)
		theirs.Status.Count = 7
		if err := other.Status().Update(ctx, theirs); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.Reconcile(context.Background(), client.ObjectKeyFromObject(w)); err != nil {
		t.Fatal(err)
	}
	if r.passes != 2 {
		t.Fatalf("passes = %d, want 2 (the second on the fresh copy)", r.passes)
	}
	got := get(t, c, w)
	if got.Status.Count != 7 || got.Status.Note != "size 1" {
		t.Fatalf("status = %+v, want both writers' fields", got.Status)
	}
}

func TestLoop_givesUpAfterMaxPasses(t *testing.T) {
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Name: "w"}}
	passes := 0
	res, err := reconcile.Loop(context.Background(), w, func(_ context.Context, w *Widget) reconcile.Result {
		passes++
		return reconcile.Restart(w.DeepCopyObject().(*Widget))
	})
	if err != nil || res.RequeueAfter != reconcile.ConflictRetry || passes != reconcile.MaxPasses {
		t.Fatalf("Loop = %v, %v after %d passes; want RequeueAfter %s after %d", res, err, passes, reconcile.ConflictRetry, reconcile.MaxPasses)
	}
}

func TestLoop_aRestartOnAnotherTypeIsAnError(t *testing.T) {
	w := &Widget{ObjectMeta: metav1.ObjectMeta{Name: "w"}}
	_, err := reconcile.Loop(context.Background(), w, func(context.Context, *Widget) reconcile.Result {
		return reconcile.Restart(&noStatus{})
	})
	if err == nil {
		t.Fatal("Loop accepted a restart on another type")
	}
}

func TestReread_aDeletedObjectEndsThePass(t *testing.T) {
	c := newClient(t)
	w := newWidget(t, c)
	if err := c.Delete(context.Background(), w); err != nil {
		t.Fatal(err)
	}
	if res := reconcile.Reread(context.Background(), c, w); !res.Is(reconcile.KindDone) {
		t.Fatalf("Reread of a deleted object = %v, want Done", res)
	}
}

func TestSettle_anotherWriteErrorFailsThePassWithBothErrors(t *testing.T) {
	stepErr, writeErr := errors.New("step"), errors.New("write")
	res := reconcile.Settle(context.Background(), nil, &Widget{}, reconcile.Failure(stepErr), writeErr)
	if !res.Is(reconcile.KindFailure) || !errors.Is(res.Err(), stepErr) || !errors.Is(res.Err(), writeErr) {
		t.Fatalf("Settle = %v, want a Failure with both errors", res)
	}
}

// noStatus is an object without a Status field.
type noStatus struct {
	metav1.TypeMeta
	metav1.ObjectMeta
}

func (n *noStatus) DeepCopyObject() kruntime.Object { out := *n; return &out }

func TestHelper_anObjectWithoutStatusIsAnError(t *testing.T) {
	obj := &noStatus{}
	h := reconcile.NewHelper[client.Object](nil, obj, owner)
	if _, err := h.Patch(context.Background(), obj); !errors.Is(err, reconcile.ErrNoStatus) {
		t.Fatalf("Patch = %v, want ErrNoStatus", err)
	}
}
