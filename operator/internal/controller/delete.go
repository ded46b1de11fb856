package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// The delete paths: an approved Delete change removing its release (the
// ChangeRequest reconciler), and a Release being deleted (the Release
// reconciler's finalizer).

// deleteSteps carry out an approved Delete change in Applying, holding
// the release's apply lock, in reverse order of an apply, one step per
// pass:
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
// recording it. Before them come the steps every change in Applying takes
// (see applySteps), and the checks made before anything is removed.
//
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=delete
func (r *ChangeRequestReconciler) deleteSteps() []reconcile.Step[*changeScope] {
	return []reconcile.Step[*changeScope]{
		{Name: "release", Run: r.reconcileReleaseOfDelete},
		{Name: "applier", Run: r.reconcileApplier},
		{Name: "current copy", Run: r.reconcileCurrentCopy},
		{Name: "apply lock", Run: r.reconcileApplyLock},
		{Name: "repository", Run: r.reconcileRepository},
		{Name: "checks", Run: r.reconcileDeleteChecks},
		{Name: "workload", Run: r.reconcileRemoveWorkload},
		{Name: "infrastructure", Run: r.reconcileDestroyPlan},
		{Name: "state and release", Run: r.reconcileDeleteRelease},
		{Name: "deleted", Run: r.reconcileDeleted},
	}
}

// reconcileReleaseOfDelete loads the Release the change deletes; when it
// is gone, the change finishes (see finishDeleteOfGoneRelease).
func (r *ChangeRequestReconciler) reconcileReleaseOfDelete(ctx context.Context, s *changeScope) reconcile.Result {
	rel := &sluicev1.Release{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.cr.Namespace, Name: s.cr.Spec.Release}, rel)
	if apierrors.IsNotFound(err) {
		return r.finishDeleteOfGoneRelease(s)
	}
	if err != nil {
		return reconcile.Failure(fmt.Errorf("get Release %s: %w", s.cr.Spec.Release, err))
	}
	s.release = rel
	return reconcile.Next()
}

// reconcileDeleteChecks fails a Delete change before anything is removed
// when the release was applied again after it was proposed, or when it
// has a destroy plan that no registered applier can apply.
func (r *ChangeRequestReconciler) reconcileDeleteChecks(_ context.Context, s *changeScope) reconcile.Result {
	cr, rel := s.cr, s.release
	if cr.Status.Deletion == nil {
		cr.Status.Deletion = &sluicev1.DeletionStatus{}
	}
	if st := cr.Status.Deletion; st.WorkloadRemovedAt != nil || st.InfrastructureDestroyedAt != nil {
		return reconcile.Next()
	}
	if d := cr.Spec.Deletion; d != nil && d.AppliedDigest != rel.Status.AppliedDigest {
		return r.deleteFailed(s, s.app.Name(), sluicev1.ReasonReleaseChanged, fmt.Sprintf(
			"the release was applied again (%s) after this deletion was proposed for %s; nothing was removed, a new Delete change describes the release as it is",
			orNone(string(rel.Status.AppliedDigest)), orNone(string(d.AppliedDigest))))
	}
	if _, canDestroy := s.app.(applier.Destroyer); hasDestroyPlan(cr) && !canDestroy {
		return r.deleteFailed(s, s.app.Name(), sluicev1.ReasonNoApplier, "the change has a destroy plan, but no Terraform applier is registered (--terraform-apply); nothing was removed")
	}
	return reconcile.Next()
}

// reconcileRemoveWorkload removes the release's workload with the
// delivery applier's Cleanup, from the namespace it was applied to. A
// destroy plan the state has moved past would fail after the workload is
// gone: it is checked first.
func (r *ChangeRequestReconciler) reconcileRemoveWorkload(ctx context.Context, s *changeScope) reconcile.Result {
	st := s.cr.Status.Deletion
	if st.WorkloadRemovedAt != nil {
		return reconcile.Next()
	}
	req, removal := s.deleteRequest()
	if hasDestroyPlan(s.cr) {
		if err := s.app.(applier.Destroyer).CheckDestroyPlan(ctx, req); err != nil {
			return r.deleteStepFailed(ctx, s, "check the destroy plan", err)
		}
	}
	msg := fmt.Sprintf("the %s applier removes no workload", s.app.Name())
	if cleaner, ok := s.app.(applier.Cleaner); ok {
		res, err := cleaner.Cleanup(ctx, removal, s.repo)
		if err != nil {
			return r.deleteStepFailed(ctx, s, fmt.Sprintf("remove the workload from namespace %s", orNone(removal.TargetNamespace)), err)
		}
		msg = res.Message
	}
	log.FromContext(ctx).Info("Removed the workload of a deleted release", "changeRequest", s.cr.Name, "release", s.release.Name, "namespace", removal.TargetNamespace, "result", msg)
	return r.deleteStepDone(s, &st.WorkloadRemovedAt, msg, "the destroy plan")
}

// reconcileDestroyPlan applies the approved destroy plan file, when the
// change has one.
func (r *ChangeRequestReconciler) reconcileDestroyPlan(ctx context.Context, s *changeScope) reconcile.Result {
	st := s.cr.Status.Deletion
	if st.InfrastructureDestroyedAt != nil {
		return reconcile.Next()
	}
	msg := "no Terraform stack to destroy"
	if hasDestroyPlan(s.cr) {
		req, _ := s.deleteRequest()
		res, err := s.app.(applier.Destroyer).ApplyDestroyPlan(ctx, req)
		if err != nil {
			return r.deleteStepFailed(ctx, s, "apply the destroy plan", err)
		}
		msg = res.Message
		log.FromContext(ctx).Info("Applied the approved destroy plan", "changeRequest", s.cr.Name, "release", s.release.Name)
	}
	return r.deleteStepDone(s, &st.InfrastructureDestroyedAt, msg, "delete the Release")
}

// deleteStepDone records a finished step of a Delete change (when, in
// *at, and what it did, in status.apply.message) and says what is next.
// The next step runs in a pass of its own, once this one is written.
func (r *ChangeRequestReconciler) deleteStepDone(s *changeScope, at **metav1.Time, msg, next string) reconcile.Result {
	now := metav1.NewTime(r.now())
	*at = &now
	s.recordStep(msg)
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, truncate(msg+"; next: "+next))
	return reconcile.Requeue(reconcile.ConflictRetry)
}

// reconcileDeleteRelease deletes the Terraform state (with a destroy
// plan) and the Release.
func (r *ChangeRequestReconciler) reconcileDeleteRelease(ctx context.Context, s *changeScope) reconcile.Result {
	st := s.cr.Status.Deletion
	if st.ReleaseDeletedAt != nil {
		return reconcile.Next()
	}
	if hasDestroyPlan(s.cr) {
		req, _ := s.deleteRequest()
		if err := s.app.(applier.Destroyer).DeleteState(ctx, req); err != nil {
			return r.deleteStepFailed(ctx, s, "delete the Terraform state", err)
		}
	}
	if err := r.deleteRelease(ctx, s.cr, s.release); err != nil {
		return reconcile.Failure(err)
	}
	now := metav1.NewTime(r.now())
	st.ReleaseDeletedAt = &now
	log.FromContext(ctx).Info("Deleted the Release", "changeRequest", s.cr.Name, "release", s.release.Name)
	return reconcile.Next()
}

// reconcileDeleted ends the Delete change as Applied: every step is done.
func (r *ChangeRequestReconciler) reconcileDeleted(_ context.Context, s *changeScope) reconcile.Result {
	return r.deleteDone(s, s.app.Name())
}

// hasDestroyPlan reports whether a Delete change carries an approved
// destroy plan.
func hasDestroyPlan(cr *sluicev1.ChangeRequest) bool { return cr.Spec.PlanFileSHA256 != "" }

// deleteRequest is what the appliers are given for a Delete change. The
// destroy plan's stack comes from the change (spec.deletion), the
// namespace the workload is removed from is where it was applied: nothing
// here reads the Release's spec, which a later push rewrote.
func (s *changeScope) deleteRequest() (applier.Request, applier.Removal) {
	req := applier.Request{Change: s.cr.DeepCopy(), Release: applier.ReleaseOf(s.release), Repository: s.repo}
	removal := applier.Removal{Release: req.Release, TargetNamespace: s.cr.NamespaceOf(s.release.Status.AppliedTargetNamespace), Change: req.Change}
	return req, removal
}

// deleteStepFailed turns a failed step of a Delete change into its
// result (see outcome); a permanent failure fails the change, keeping the
// steps done before it in its message.
func (r *ChangeRequestReconciler) deleteStepFailed(ctx context.Context, s *changeScope, step string, err error) reconcile.Result {
	return r.outcome(ctx, s, attempt{app: s.app, step: step, fail: func(reason, msg string) reconcile.Result {
		return r.deleteFailed(s, s.app.Name(), reason, msg)
	}}, err)
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
func (r *ChangeRequestReconciler) deleteDone(s *changeScope, name string) reconcile.Result {
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
	return reconcile.Done()
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
func (r *ChangeRequestReconciler) deleteFailed(s *changeScope, name, reason, msg string) reconcile.Result {
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
	return reconcile.Done()
}

// finishDeleteOfGoneRelease ends a Delete change whose Release is gone
// while it was applying: the operator stopped after the last step deleted
// the Release, before it could record that.
func (r *ChangeRequestReconciler) finishDeleteOfGoneRelease(s *changeScope) reconcile.Result {
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

// deleteSteps are the steps of a Release being deleted: the finalizer
// lets it go once what was applied for it is removed, unless an approved
// Delete change removed it already. An apply in flight finishes first;
// a failing cleanup keeps the finalizer and is retried.
func (r *ReleaseReconciler) deleteSteps() []reconcile.Step[*sluicev1.Release] {
	return []reconcile.Step[*sluicev1.Release]{
		{Name: "finalizer", Run: hasFinalizer},
		{Name: "deleted by change", Run: r.reconcileDeletedByChange},
		{Name: "apply in flight", Run: r.reconcileApplyInFlight},
		{Name: "cleanup", Run: r.reconcileCleanup},
		{Name: "remove finalizer", Run: r.removeFinalizer},
	}
}

// hasFinalizer ends the pass over a Release whose finalizer is gone.
func hasFinalizer(_ context.Context, rel *sluicev1.Release) reconcile.Result {
	if !controllerutil.ContainsFinalizer(rel, sluicev1.ReleaseFinalizer) {
		return reconcile.Done()
	}
	return reconcile.Next()
}

// reconcileApplyInFlight waits for a change being applied: cleaning up
// under it would race.
func (r *ReleaseReconciler) reconcileApplyInFlight(ctx context.Context, rel *sluicev1.Release) reconcile.Result {
	holder := rel.Status.CurrentChange
	if holder == "" {
		return reconcile.Next()
	}
	cr := &sluicev1.ChangeRequest{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: holder}, cr)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Failure(fmt.Errorf("get lock holder %s: %w", holder, err))
	}
	if err == nil && cr.Status.Phase == sluicev1.PhaseApplying {
		log.FromContext(ctx).Info("Deletion waits for the change being applied", "changeRequest", holder)
		return reconcile.Requeue(10 * time.Second)
	}
	return reconcile.Next()
}

// reconcileCleanup runs the cleanup of the release's applier; while Argo
// CD is still pruning it looks again later, with no error.
func (r *ReleaseReconciler) reconcileCleanup(ctx context.Context, rel *sluicev1.Release) reconcile.Result {
	err := r.cleanup(ctx, rel)
	if w, ok := applier.AsWaiting(err); ok {
		log.FromContext(ctx).V(1).Info("Cleanup waits", "reason", w.Reason, "message", w.Message)
		return reconcile.Waiting(w.Reason, w.Message, w.After())
	}
	if err != nil {
		return reconcile.Failure(err)
	}
	return reconcile.Next()
}

// removeFinalizer lets the Release go.
func (r *ReleaseReconciler) removeFinalizer(ctx context.Context, rel *sluicev1.Release) reconcile.Result {
	orig := rel.DeepCopy()
	controllerutil.RemoveFinalizer(rel, sluicev1.ReleaseFinalizer)
	if err := r.Client.Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
		return reconcile.Failure(client.IgnoreNotFound(fmt.Errorf("remove finalizer of Release %s: %w", rel.Name, err)))
	}
	return reconcile.Done()
}

// reconcileDeletedByChange lets a Release go that an approved Delete change
// removed (status.deletedBy, confirmed against the change): its workload
// and infrastructure are gone and its state deleted, so the finalizer's
// cleanup is not run a second time. It reports whether it handled rel.
// Any other deletion (a break-glass delete) takes the normal cleanup.
func (r *ReleaseReconciler) reconcileDeletedByChange(ctx context.Context, rel *sluicev1.Release) reconcile.Result {
	cr, ok, err := deletedByChange(ctx, r.APIReader, rel)
	if err != nil {
		return reconcile.Failure(err)
	}
	if !ok {
		return reconcile.Next()
	}
	if r.Recorder != nil {
		what := "its steps are recorded in its status"
		if cr.Status.Apply != nil && cr.Status.Apply.Message != "" {
			what = cr.Status.Apply.Message
		}
		r.Recorder.Eventf(rel, nil, "Normal", sluicev1.ReasonDeleted, "Cleanup",
			"removed by the approved Delete change %s: %s", cr.Name, truncate(what))
	}
	return r.removeFinalizer(ctx, rel)
}

// cleanup removes what was applied for the release (see cleaners: the
// applied change's delivery and namespace, never the Release's spec). The
// Terraform state stays in place.
func (r *ReleaseReconciler) cleanup(ctx context.Context, rel *sluicev1.Release) error {
	applied, err := r.appliedChange(ctx, rel)
	if err != nil {
		return err
	}
	removal := applier.Removal{Release: applier.ReleaseOf(rel), TargetNamespace: rel.Status.AppliedTargetNamespace}
	if applied != nil {
		removal.TargetNamespace = applied.NamespaceOf(rel.Status.AppliedTargetNamespace)
	}
	if removal.TargetNamespace != "" {
		repo := &sluicev1.Repository{}
		if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Spec.Repository}, repo); err != nil {
			if !apierrors.IsNotFound(err) {
				return fmt.Errorf("get Repository %s for cleanup: %w", rel.Spec.Repository, err)
			}
			repo = nil
		}
		for _, app := range r.cleaners(applied) {
			cleaner := app.(applier.Cleaner)
			res, err := cleaner.Cleanup(ctx, removal, repo)
			if err != nil {
				if _, waiting := applier.AsWaiting(err); waiting {
					return err
				}
				if r.Recorder != nil {
					r.Recorder.Eventf(rel, nil, "Warning", "CleanupFailed", "Cleanup", "the %s applier's cleanup in namespace %s failed: %s", app.Name(), removal.TargetNamespace, truncate(err.Error()))
				}
				return fmt.Errorf("clean up Release %s with the %s applier: %w", rel.Name, app.Name(), err)
			}
			if r.Recorder != nil && res.Message != "" {
				r.Recorder.Eventf(rel, nil, "Normal", "Cleanup", "Cleanup", "%s", truncate(res.Message))
			}
		}
	}
	if tf := stackOf(applied); tf != nil && r.Recorder != nil {
		// Deleting a Release never destroys infrastructure (a destroy is a
		// change of its own); say where the state stays.
		ws := tf.Workspace
		if ws == "" {
			ws = "default"
		}
		r.Recorder.Eventf(rel, nil, "Warning", ReasonTerraformStateKept, "Cleanup",
			"the Terraform state of %s stays in place (Secret tfstate-%s-%s in %s); nothing was destroyed", rel.Name, ws, rel.Name, rel.Namespace)
	}
	return nil
}

// appliedChange reads the release's last applied change
// (status.appliedChange); nil when nothing was applied or the change is
// gone (retention).
func (r *ReleaseReconciler) appliedChange(ctx context.Context, rel *sluicev1.Release) (*sluicev1.ChangeRequest, error) {
	name := rel.Status.AppliedChange
	if name == "" {
		return nil, nil
	}
	cr := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: name}, cr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("get the applied ChangeRequest %s: %w", name, err)
	}
	return cr, nil
}

// cleaners are the Cleaners that remove what was applied: the applied
// change's delivery's, or, when that change is gone, every registered
// Cleaner (each removes only what it installed under the Release's name,
// and nothing else says which delivery was used: not the spec, which a
// later push may have rewritten).
func (r *ReleaseReconciler) cleaners(applied *sluicev1.ChangeRequest) []applier.Applier {
	var out []applier.Applier
	if applied != nil {
		if app, ok := r.Appliers.For(applied.DeliveryOf()); ok {
			if _, ok := app.(applier.Cleaner); ok {
				out = append(out, app)
			}
		}
		return out
	}
	for _, d := range slices.Sorted(maps.Keys(r.Appliers)) {
		if _, ok := r.Appliers[d].(applier.Cleaner); ok {
			out = append(out, r.Appliers[d])
		}
	}
	return out
}

// stackOf is the applied change's Terraform stack, nil without one.
func stackOf(cr *sluicev1.ChangeRequest) *sluicev1.TerraformSource {
	if cr == nil {
		return nil
	}
	return cr.StackOf()
}

// ReasonTerraformStateKept is the Event reason for a deleted Release whose
// Terraform state is left in place.
const ReasonTerraformStateKept = "TerraformStateKept"
