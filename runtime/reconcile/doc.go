// Package reconcile is the one shape of every Sluice reconciler: typed
// results, a table of ordered steps, one status write per pass, and the
// restart on a fresher copy when the cache was behind or the write lost a
// race. It depends on controller-runtime and apimachinery only.
//
// The parts:
//
//   - Result: what a step or a pass decided: Next (go on), Done,
//     Requeue(after), Waiting(reason, message, after), Stalled(reason,
//     message), Failure(err), Restart(fresh). Result.Outcome is the one
//     translation to controller-runtime's (ctrl.Result, error).
//   - Step and RunSteps: a pass is a table of named steps run in order;
//     the first that does not return Next ends the pass.
//   - Helper: snapshots the object at the start of a pass; Patch writes
//     its status once, only when it changed (a no-op pass writes
//     nothing), with the resourceVersion read, so a concurrent writer
//     makes it fail with a conflict rather than be overwritten.
//   - Summary: Conclude writes Ready, Stalled, Progressing and
//     observedGeneration from the pass's Result, once, at its end, and
//     nothing after a Failure.
//   - Loop, Settle and Reread: a pass whose write lost a race (or that
//     found the cache behind) runs again at once on a copy read from the
//     API server, at most MaxPasses times.
//
// A reconciler written with it reads top to bottom:
//
//	func (r *WidgetReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
//		w := &v1.Widget{}
//		if err := r.Client.Get(ctx, req.NamespacedName, w); err != nil {
//			return ctrl.Result{}, client.IgnoreNotFound(err)
//		}
//		return reconcile.Loop(ctx, w, r.pass)
//	}
//
//	// pass runs the steps on w, summarises and writes the status once.
//	func (r *WidgetReconciler) pass(ctx context.Context, w *v1.Widget) reconcile.Result {
//		s := &widgetScope{w: w, patch: reconcile.NewHelper(r.Client, w, "widget-controller")}
//		res := reconcile.RunSteps(ctx, s, []reconcile.Step[*widgetScope]{
//			{Name: "source", Run: r.reconcileSource},
//			{Name: "apply", Run: r.reconcileApply},
//		})
//		if res.Is(reconcile.KindRestart) {
//			return res // nothing of this pass is written
//		}
//		summary := reconcile.Summary{Conditions: &w.Status.Conditions, ObservedGeneration: &w.Status.ObservedGeneration, Generation: w.Generation}
//		summary.Conclude(res, s.ready)
//		_, err := s.patch.Patch(ctx, w)
//		return reconcile.Settle(ctx, r.APIReader, w, res, err)
//	}
//
//	// reconcileSource loads the source; without it the widget waits.
//	func (r *WidgetReconciler) reconcileSource(ctx context.Context, s *widgetScope) reconcile.Result {
//		src, err := r.source(ctx, s.w)
//		switch {
//		case errors.Is(err, errNotReady):
//			return reconcile.Waiting("SourceNotReady", "waiting for the source", 30*time.Second)
//		case errors.Is(err, errBadSpec):
//			return reconcile.Stalled("InvalidSpec", err.Error())
//		case err != nil:
//			return reconcile.Failure(fmt.Errorf("load the source: %w", err))
//		}
//		s.source = src
//		return reconcile.Next()
//	}
//
// Steps change the object in memory only; the pass writes it once. A step
// that must act outside the object (call an applier, take a lock) does so
// itself, and the pass must then not restart after a lost write (the act
// would be repeated): check that before calling Settle.
package reconcile
