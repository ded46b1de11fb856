package reconcile_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

func TestOutcome_isTheOneTranslationToControllerRuntime(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name string
		res  reconcile.Result
		want ctrl.Result
		err  error
	}{
		{"Next ends quietly", reconcile.Next(), ctrl.Result{}, nil},
		{"Done ends quietly", reconcile.Done(), ctrl.Result{}, nil},
		{"Requeue looks again after its delay", reconcile.Requeue(time.Minute), ctrl.Result{RequeueAfter: time.Minute}, nil},
		{"Waiting looks again after its delay, without an error", reconcile.Waiting("Syncing", "Argo CD syncs", 5*time.Second), ctrl.Result{RequeueAfter: 5 * time.Second}, nil},
		{"Stalled ends quietly (no backoff loop)", reconcile.Stalled("NoApplier", "start the operator with it"), ctrl.Result{}, nil},
		{"Failure returns its error for backoff", reconcile.Failure(boom), ctrl.Result{}, boom},
		{"Failure of nil is Done", reconcile.Failure(nil), ctrl.Result{}, nil},
		{"a Restart that reaches it looks again soon", reconcile.Restart(&Widget{}), ctrl.Result{RequeueAfter: reconcile.ConflictRetry}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.res.Outcome()
			if got != tc.want || !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
				t.Fatalf("Outcome = %v, %v; want %v, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestRunSteps_runsInOrderAndStopsAtTheFirstThatEndsThePass(t *testing.T) {
	var ran []string
	step := func(name string, res reconcile.Result) reconcile.Step[*[]string] {
		return reconcile.Step[*[]string]{Name: name, Run: func(_ context.Context, s *[]string) reconcile.Result {
			*s = append(*s, name)
			return res
		}}
	}
	res := reconcile.RunSteps(context.Background(), &ran, []reconcile.Step[*[]string]{
		step("a", reconcile.Next()), step("b", reconcile.Requeue(time.Second)), step("c", reconcile.Next()),
	})
	if !res.Is(reconcile.KindRequeue) || res.After() != time.Second || len(ran) != 2 || ran[1] != "b" {
		t.Fatalf("RunSteps = %v after %v; want b's Requeue after a and b", res, ran)
	}
	ran = nil
	if res := reconcile.RunSteps(context.Background(), &ran, []reconcile.Step[*[]string]{step("a", reconcile.Next())}); !res.Is(reconcile.KindDone) {
		t.Fatalf("RunSteps of steps that all go on = %v, want Done", res)
	}
}

func TestSummary_concludesFromTheResultOfThePass(t *testing.T) {
	ready := reconcile.Ready{Status: metav1.ConditionTrue, Reason: "Applied", Message: "applied"}
	for _, tc := range []struct {
		name                        string
		res                         reconcile.Result
		ready, stalled, progressing metav1.ConditionStatus // "" = absent
		readyReason                 string
		observed                    int64
	}{
		{"Done sets Ready as the steps said and observes", reconcile.Done(), metav1.ConditionTrue, "", "", "Applied", 3},
		{"Stalled says so and Ready False", reconcile.Stalled("NoApplier", "no"), metav1.ConditionFalse, metav1.ConditionTrue, "", "NoApplier", 3},
		{"Waiting is Progressing and Ready False", reconcile.Waiting("Syncing", "yes", time.Second), metav1.ConditionFalse, "", metav1.ConditionTrue, "Syncing", 3},
		{"Failure concludes nothing", reconcile.Failure(errors.New("x")), metav1.ConditionUnknown, metav1.ConditionTrue, "", "Old", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &Widget{ObjectMeta: metav1.ObjectMeta{Generation: 3}}
			w.Status.ObservedGeneration = 2
			s := summaryOf(w)
			s.Set(reconcile.ConditionReady, metav1.ConditionUnknown, "Old", "old")
			s.Set(reconcile.ConditionStalled, metav1.ConditionTrue, "Old", "old")
			s.Conclude(tc.res, ready)
			for typ, want := range map[string]metav1.ConditionStatus{reconcile.ConditionReady: tc.ready, reconcile.ConditionStalled: tc.stalled, reconcile.ConditionProgressing: tc.progressing} {
				c := meta.FindStatusCondition(w.Status.Conditions, typ)
				switch {
				case want == "" && c != nil:
					t.Errorf("%s = %+v, want it removed", typ, c)
				case want != "" && (c == nil || c.Status != want):
					t.Errorf("%s = %+v, want %s", typ, c, want)
				}
			}
			if c := meta.FindStatusCondition(w.Status.Conditions, reconcile.ConditionReady); c.Reason != tc.readyReason {
				t.Errorf("Ready reason = %s, want %s", c.Reason, tc.readyReason)
			}
			if w.Status.ObservedGeneration != tc.observed {
				t.Errorf("observedGeneration = %d, want %d", w.Status.ObservedGeneration, tc.observed)
			}
		})
	}
}

func TestSummary_boundsMessagesOnARuneBoundary(t *testing.T) {
	w := &Widget{}
	s := reconcile.Summary{Conditions: &w.Status.Conditions, MaxMessage: 8}
	s.Set(reconcile.ConditionReady, metav1.ConditionTrue, "R", "ééééé\xff")
	if got := w.Status.Conditions[0].Message; got != "éé…" {
		t.Fatalf("message = %q, want %q", got, "éé…")
	}
}
