package controller

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// applyDelete carries out an approved Delete change, holding the release's
// apply lock, in reverse order of an apply, one step per pass:
//
//  1. remove the workload: the delivery applier's Cleanup (Helm uninstall,
//     or delete the Application and wait for Argo CD's prune);
//  2. apply the approved destroy plan file (applier.Destroyer), never a
//     fresh destroy: a stale plan fails the change with StalePlan and
//     destroys nothing;
//  3. delete the Terraform state and the Release (status.deletedBy tells
//     the finalizer that nothing is left to clean up).
//
// Each finished step is recorded in status.deletion before the next one
// starts, so an operator restarted anywhere carries on with the next step;
// the steps themselves are idempotent for the moment between doing one and
// recording it.
//
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=delete
func (r *ChangeRequestReconciler) applyDelete(ctx context.Context, s *changeScope, app applier.Applier, rel *sluicev1.Release, repo *sluicev1.Repository) stepResult {
	cr := s.cr
	if cr.Status.Deletion == nil {
		cr.Status.Deletion = &sluicev1.DeletionStatus{}
	}
	st := cr.Status.Deletion
	destroyer, canDestroy := app.(applier.Destroyer)
	hasPlan := cr.Spec.PlanFileSHA256 != ""
	now := metav1.NewTime(r.now())
	if st.WorkloadRemovedAt == nil && st.InfrastructureDestroyedAt == nil {
		// Checks before anything is removed.
		if d := cr.Spec.Deletion; d != nil && d.AppliedDigest != rel.Status.AppliedDigest {
			return r.deleteFailed(s, app.Name(), sluicev1.ReasonReleaseChanged, fmt.Sprintf(
				"the release was applied again (%s) after this deletion was proposed for %s; nothing was removed, a new Delete change describes the release as it is",
				orNone(string(rel.Status.AppliedDigest)), orNone(string(d.AppliedDigest))))
		}
		if hasPlan && !canDestroy {
			return r.deleteFailed(s, app.Name(), sluicev1.ReasonNoApplier, "the change has a destroy plan, but no Terraform applier is registered (--terraform-apply); nothing was removed")
		}
	}
	// The destroy plan's stack comes from the change (spec.deletion), the
	// namespace the workload is removed from is where it was applied:
	// nothing here reads the Release's spec, which a later push rewrote.
	req := applier.Request{Change: cr.DeepCopy(), Release: applier.ReleaseOf(rel), Repository: repo}
	removal := applier.Removal{Release: req.Release, TargetNamespace: cr.NamespaceOf(rel.Status.AppliedTargetNamespace), Change: req.Change}
	logger := log.FromContext(ctx).WithValues("changeRequest", cr.Name, "release", rel.Name)

	switch {
	case st.WorkloadRemovedAt == nil:
		if hasPlan {
			// A destroy plan the state has moved past would fail after
			// the workload is gone: find out first.
			if err := destroyer.CheckDestroyPlan(ctx, req); err != nil {
				return r.deleteStepFailed(s, app, "check the destroy plan", err)
			}
		}
		msg := fmt.Sprintf("the %s applier removes no workload", app.Name())
		if cleaner, ok := app.(applier.Cleaner); ok {
			res, err := cleaner.Cleanup(ctx, removal, repo)
			if err != nil {
				return r.deleteStepFailed(s, app, fmt.Sprintf("remove the workload from namespace %s", orNone(removal.TargetNamespace)), err)
			}
			msg = res.Message
		}
		st.WorkloadRemovedAt = &now
		s.recordStep(msg)
		logger.Info("Removed the workload of a deleted release", "namespace", removal.TargetNamespace, "result", msg)
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, truncate(msg+"; next: the destroy plan"))
		return requeueAfter(conflictRetry)

	case st.InfrastructureDestroyedAt == nil:
		msg := "no Terraform stack to destroy"
		if hasPlan {
			res, err := destroyer.ApplyDestroyPlan(ctx, req)
			if err != nil {
				return r.deleteStepFailed(s, app, "apply the destroy plan", err)
			}
			msg = res.Message
			logger.Info("Applied the approved destroy plan")
		}
		st.InfrastructureDestroyedAt = &now
		s.recordStep(msg)
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, truncate(msg+"; next: delete the Release"))
		return requeueAfter(conflictRetry)

	case st.ReleaseDeletedAt == nil:
		if hasPlan {
			if err := destroyer.DeleteState(ctx, req); err != nil {
				return r.deleteStepFailed(s, app, "delete the Terraform state", err)
			}
		}
		if err := r.deleteRelease(ctx, cr, rel); err != nil {
			return failed(err)
		}
		st.ReleaseDeletedAt = &now
		logger.Info("Deleted the Release")
	}
	return r.deleteDone(s, app.Name())
}

// deleteRelease marks the Release as removed by cr, then deletes it. A
// Release already being deleted, or gone, is no error.
func (r *ChangeRequestReconciler) deleteRelease(ctx context.Context, cr *sluicev1.ChangeRequest, rel *sluicev1.Release) error {
	if !rel.DeletionTimestamp.IsZero() {
		return nil
	}
	if rel.Status.DeletedBy != cr.Name {
		orig := rel.DeepCopy()
		rel.Status.DeletedBy = cr.Name
		if err := r.Client.Status().Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
			return client.IgnoreNotFound(fmt.Errorf("mark Release %s deleted by %s: %w", rel.Name, cr.Name, err))
		}
	}
	if err := r.Client.Delete(ctx, rel, client.Preconditions{UID: &rel.UID}); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("delete Release %s: %w", rel.Name, err)
	}
	return nil
}

// deleteDone ends an approved Delete change as Applied.
func (r *ChangeRequestReconciler) deleteDone(s *changeScope, name string) stepResult {
	finished := metav1.NewTime(r.now())
	if s.cr.Status.Apply == nil {
		s.cr.Status.Apply = &sluicev1.ApplyResult{StartedAt: &finished}
	}
	s.cr.Status.Apply.Applier = name
	s.cr.Status.Apply.FinishedAt = &finished
	s.recordStep(fmt.Sprintf("release %s removed (Terraform state and Release deleted)", s.cr.Spec.Release))
	lead := finished.Sub(s.cr.CreationTimestamp.Time)
	s.written = append(s.written, func() { r.Metrics.Apply(name, metrics.ResultApplied, 0, lead) })
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionTrue, sluicev1.ReasonDeleted, s.cr.Status.Apply.Message)
	s.setPhase(sluicev1.PhaseApplied, sluicev1.ReasonDeleted, "release removed by the "+name+" applier")
	return done()
}

// recordStep appends what a finished step of a Delete change did to
// status.apply.message, so the change says, step by step, what was
// really removed and where (describe shows it).
func (s *changeScope) recordStep(msg string) {
	if s.cr.Status.Apply == nil {
		s.cr.Status.Apply = &sluicev1.ApplyResult{}
	}
	if prev := s.cr.Status.Apply.Message; prev != "" {
		msg = prev + "; " + msg
	}
	s.cr.Status.Apply.Message = truncate(msg)
}

// deleteFailed ends a Delete change as Failed; the message keeps the
// steps that were done before the failure.
func (r *ChangeRequestReconciler) deleteFailed(s *changeScope, name, reason, msg string) stepResult {
	finished := metav1.NewTime(r.now())
	if s.cr.Status.Apply == nil {
		s.cr.Status.Apply = &sluicev1.ApplyResult{StartedAt: &finished}
	}
	s.cr.Status.Apply.Applier = name
	s.cr.Status.Apply.FinishedAt = &finished
	s.recordStep("failed: " + msg)
	s.written = append(s.written, func() { r.Metrics.Apply(name, metrics.ResultFailed, 0, 0) })
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, reason, msg)
	s.setPhase(sluicev1.PhaseFailed, reason, msg)
	return done()
}

// deleteStepFailed turns a failed step into the change's outcome: a
// permanent failure fails it, a wait (Argo CD pruning) is looked at again
// later, a stall waits for an administrator, a stopping operator leaves it
// for the restart, anything else is retried with backoff.
func (r *ChangeRequestReconciler) deleteStepFailed(s *changeScope, app applier.Applier, step string, err error) stepResult {
	if f, permanent := applier.AsFailure(err); permanent {
		reason := f.Reason
		if reason == "" {
			reason = sluicev1.ReasonApplyFailed
		}
		return r.deleteFailed(s, app.Name(), reason, step+": "+f.Error())
	}
	if w, ok := applier.AsWaiting(err); ok {
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, w.Reason, truncate(step+": "+w.Message))
		return waitingFor(w)
	}
	if st, ok := applier.AsStalled(err); ok {
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, st.Reason, truncate(step+": "+st.Message))
		return stalledBy(st)
	}
	if errors.Is(err, context.Canceled) {
		return failed(err)
	}
	r.Metrics.Apply(app.Name(), metrics.ResultRetry, 0, 0)
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, truncate(step+" failed, retrying: "+err.Error()))
	return failed(fmt.Errorf("delete %s: %s: %w", s.cr.Name, step, err))
}

// finishDeleteOfGoneRelease ends a Delete change whose Release is gone
// while it was applying: the operator stopped after the last step deleted
// the Release, before it could record that.
func (r *ChangeRequestReconciler) finishDeleteOfGoneRelease(s *changeScope) stepResult {
	st := s.cr.Status.Deletion
	if st == nil || st.InfrastructureDestroyedAt == nil {
		// Someone else deleted the Release before this change got that
		// far: what is left is not this change's to finish.
		return r.deleteFailed(s, appliedBy(s.cr), sluicev1.ReasonReleaseNotFound,
			fmt.Sprintf("Release %s was deleted by someone else before this change finished", s.cr.Spec.Release))
	}
	now := metav1.NewTime(r.now())
	st.ReleaseDeletedAt = &now
	return r.deleteDone(s, appliedBy(s.cr))
}

// appliedBy is the applier name recorded in a change's status.
func appliedBy(cr *sluicev1.ChangeRequest) string {
	if cr.Status.Apply != nil {
		return cr.Status.Apply.Applier
	}
	return ""
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// deletedByChange reports whether rel was removed by an approved Delete
// change that got past its destroy step: the change named in
// status.deletedBy exists, deletes this release, and recorded the
// workload and the infrastructure gone. Only then may the finalizer skip
// its own cleanup.
func deletedByChange(ctx context.Context, c client.Reader, rel *sluicev1.Release) (*sluicev1.ChangeRequest, bool, error) {
	name := rel.Status.DeletedBy
	if name == "" {
		return nil, false, nil
	}
	cr := &sluicev1.ChangeRequest{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: name}, cr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("get ChangeRequest %s: %w", name, err)
	}
	st := cr.Status.Deletion
	ok := cr.IsDelete() && cr.Spec.Release == rel.Name && st != nil && st.WorkloadRemovedAt != nil && st.InfrastructureDestroyedAt != nil
	return cr, ok, nil
}
