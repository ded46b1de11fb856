package controller

import (
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// stepResult is what one reconcile step decided. The zero value means
// "go on with the next step"; every other outcome ends the pass:
//
//   - done: nothing more to do in this pass (a watch brings the next one);
//   - requeue after: look again after a while (nothing is wrong);
//   - waiting: another system is at work (Argo CD syncing); the status
//     says what is waited for (a Progressing condition with its reason),
//     and the change is looked at again later, without an error, a
//     failure metric or error backoff;
//   - stalled: only an administrator can fix it (a missing binary, no
//     applier for the delivery); the status says so (a Stalled condition)
//     and nothing is retried until something changes;
//   - error: retried with backoff; the status of the pass is written, but
//     not summarised (observedGeneration and Ready stay as they were).
//
// restart asks Reconcile to run the steps again on a fresher copy of the
// object (read from the API server when the cache was behind), instead of
// a short requeue.
type stepResult struct {
	stop         bool
	requeueAfter time.Duration
	waiting      *applier.Waiting
	stalled      *applier.Stalled
	err          error
	restart      any
}

// next goes on with the next step.
func next() stepResult { return stepResult{} }

// done ends the pass.
func done() stepResult { return stepResult{stop: true} }

// requeueAfter ends the pass and looks again after d.
func requeueAfter(d time.Duration) stepResult { return stepResult{stop: true, requeueAfter: d} }

// waitingFor ends the pass waiting for another system.
func waitingFor(w *applier.Waiting) stepResult {
	return stepResult{stop: true, requeueAfter: w.After(), waiting: w}
}

// stalledBy ends the pass until an administrator acts.
func stalledBy(s *applier.Stalled) stepResult { return stepResult{stop: true, stalled: s} }

// failed ends the pass with an error (retried with backoff).
func failed(err error) stepResult { return stepResult{stop: true, err: err} }

// orDone is failed(err) when err is set, else done().
func orDone(err error) stepResult {
	if err != nil {
		return failed(err)
	}
	return done()
}

// restartWith ends the pass and runs the steps again on obj.
func restartWith(obj any) stepResult { return stepResult{stop: true, restart: obj} }

// result is the controller-runtime outcome of a pass.
func (s stepResult) result() (ctrl.Result, error) {
	if s.err != nil {
		return ctrl.Result{}, s.err
	}
	return ctrl.Result{RequeueAfter: s.requeueAfter}, nil
}
