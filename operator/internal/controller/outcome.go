package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// attempt is one call of an applier for a change (an apply, or one step of
// a Delete change), as the outcome switch needs it.
type attempt struct {
	app applier.Applier
	// step names a step of a Delete change ("apply the destroy plan");
	// empty for an apply. Messages of a step start with it.
	step string
	// took is how long the call took (zero for the steps of a Delete
	// change, which are not timed).
	took time.Duration
	// fail ends the change as Failed with reason and message.
	fail func(reason, message string) reconcile.Result
}

// outcome turns what an applier call returned into the change's result:
// the one switch for an apply and for every step of a Delete change.
//
//   - a permanent failure (applier.Failure) fails the change;
//   - a wait (Argo CD syncing or pruning) is looked at again later,
//     nothing failed, nothing is counted;
//   - a stall (a missing binary) waits for an administrator;
//   - a stopping operator leaves the change in Applying for the restart,
//     which hands it to the applier again;
//   - anything else is retried with backoff, and counted as a retry.
//
// A call that succeeded (err == nil) is the caller's to record.
func (r *ChangeRequestReconciler) outcome(ctx context.Context, s *changeScope, a attempt, err error) reconcile.Result {
	if f, permanent := applier.AsFailure(err); permanent {
		reason := f.Reason
		if reason == "" {
			reason = sluicev1.ReasonApplyFailed
		}
		return a.fail(reason, a.prefixed(f.Error()))
	}
	if w, ok := applier.AsWaiting(err); ok {
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, w.Reason, a.prefixed(w.Message))
		log.FromContext(ctx).V(1).Info("Waiting", "applier", a.app.Name(), "step", a.step, "reason", w.Reason, "retryAfter", w.After().String())
		return reconcile.Waiting(w.Reason, w.Message, w.After())
	}
	if st, ok := applier.AsStalled(err); ok {
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, st.Reason, a.prefixed(st.Message))
		return reconcile.Stalled(st.Reason, st.Message)
	}
	if errors.Is(err, context.Canceled) {
		// The operator is stopping; the change stays Applying and is
		// handed to the applier again after the restart.
		return reconcile.Failure(err)
	}
	r.Metrics.Apply(a.app.Name(), metrics.ResultRetry, a.took, 0)
	if a.step == "" {
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, "apply attempt failed, retrying: "+err.Error())
		return reconcile.Failure(fmt.Errorf("apply %s with the %s applier: %w", s.cr.Name, a.app.Name(), err))
	}
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, a.step+" failed, retrying: "+err.Error())
	return reconcile.Failure(fmt.Errorf("delete %s: %s: %w", s.cr.Name, a.step, err))
}

// prefixed is msg, after the step's name when the attempt is a step of a
// Delete change.
func (a attempt) prefixed(msg string) string {
	if a.step == "" {
		return msg
	}
	return a.step + ": " + msg
}
