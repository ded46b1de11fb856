package reconcile

import (
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kind is what a step or a pass decided.
type Kind int

// The kinds of Result, from "go on" to "look again on a fresher copy".
const (
	// KindNext goes on with the next step (the zero Result).
	KindNext Kind = iota
	// KindDone ends the pass: nothing more to do until a watch fires.
	KindDone
	// KindRequeue ends the pass and looks again after a while; nothing is
	// wrong.
	KindRequeue
	// KindWaiting ends the pass while another system is at work; the
	// status says what is waited for (Progressing) and the object is
	// looked at again later, without an error or error backoff.
	KindWaiting
	// KindStalled ends the pass until someone changes something; only an
	// administrator can help. The status says so (Stalled) and nothing is
	// retried.
	KindStalled
	// KindFailure ends the pass with an error: retried with backoff, the
	// status summary (observedGeneration, Ready) is left as it was.
	KindFailure
	// KindRestart ends the pass and runs it again, at once, on a fresher
	// copy of the object (see Loop).
	KindRestart
)

// String names the kind for logs.
func (k Kind) String() string {
	switch k {
	case KindNext:
		return "Next"
	case KindDone:
		return "Done"
	case KindRequeue:
		return "Requeue"
	case KindWaiting:
		return "Waiting"
	case KindStalled:
		return "Stalled"
	case KindFailure:
		return "Failure"
	case KindRestart:
		return "Restart"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Result is the typed outcome of a step or of a whole pass. The zero value
// is Next. Build one with Next, Done, Requeue, Waiting, Stalled, Failure or
// Restart; Outcome translates it for controller-runtime.
type Result struct {
	kind            Kind
	after           time.Duration
	reason, message string
	err             error
	fresh           client.Object
}

// Next goes on with the next step.
func Next() Result { return Result{} }

// Done ends the pass; a watch brings the next one.
func Done() Result { return Result{kind: KindDone} }

// Requeue ends the pass and looks again after d (nothing is wrong).
func Requeue(after time.Duration) Result { return Result{kind: KindRequeue, after: after} }

// Waiting ends the pass while another system is at work: reason and
// message say what is waited for, after is when to look again.
func Waiting(reason, message string, after time.Duration) Result {
	return Result{kind: KindWaiting, reason: reason, message: message, after: after}
}

// Stalled ends the pass until an administrator acts: reason and message
// say what is wrong. Nothing is retried.
func Stalled(reason, message string) Result {
	return Result{kind: KindStalled, reason: reason, message: message}
}

// Failure ends the pass with err, retried with backoff. Failure(nil) is
// Done, so a step may end with Failure(err) whatever err is.
func Failure(err error) Result {
	if err == nil {
		return Done()
	}
	return Result{kind: KindFailure, err: err}
}

// Restart ends the pass and runs it again on fresh, a copy read from the
// API server (or returned by its own write); see Loop.
func Restart(fresh client.Object) Result { return Result{kind: KindRestart, fresh: fresh} }

// Kind is what the result decided.
func (r Result) Kind() Kind { return r.kind }

// Ends reports whether the result ends the pass (anything but Next).
func (r Result) Ends() bool { return r.kind != KindNext }

// Is reports whether the result is of kind k.
func (r Result) Is(k Kind) bool { return r.kind == k }

// After is when to look again (Requeue, Waiting); zero otherwise.
func (r Result) After() time.Duration { return r.after }

// Reason is the reason of a Waiting or Stalled result.
func (r Result) Reason() string { return r.reason }

// Message is the message of a Waiting or Stalled result.
func (r Result) Message() string { return r.message }

// Err is the error of a Failure; nil otherwise.
func (r Result) Err() error { return r.err }

// Fresh is the copy a Restart runs on; nil otherwise.
func (r Result) Fresh() client.Object { return r.fresh }

// Outcome is the one translation of a Result to what controller-runtime
// expects: a Failure returns its error (backoff), Requeue and Waiting
// return RequeueAfter, everything else ends quietly. A Restart that
// reaches it (Loop ran out of passes) looks again after ConflictRetry.
func (r Result) Outcome() (ctrl.Result, error) {
	switch r.kind {
	case KindFailure:
		return ctrl.Result{}, r.err
	case KindRequeue, KindWaiting:
		return ctrl.Result{RequeueAfter: r.after}, nil
	case KindRestart:
		return ctrl.Result{RequeueAfter: ConflictRetry}, nil
	}
	return ctrl.Result{}, nil
}

// String describes the result for logs.
func (r Result) String() string {
	switch r.kind {
	case KindRequeue:
		return fmt.Sprintf("Requeue(%s)", r.after)
	case KindWaiting:
		return fmt.Sprintf("Waiting(%s: %s, %s)", r.reason, r.message, r.after)
	case KindStalled:
		return fmt.Sprintf("Stalled(%s: %s)", r.reason, r.message)
	case KindFailure:
		return fmt.Sprintf("Failure(%v)", r.err)
	}
	return r.kind.String()
}
