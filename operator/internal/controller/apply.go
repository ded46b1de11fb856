package controller

import (
	"context"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// applySteps are the steps of a change in Applying: its Release, its
// applier, a current copy of it, the apply lock and its Repository, and
// only then the applier's call (the first time, or again after a
// restart: appliers are idempotent per change).
func (r *ChangeRequestReconciler) applySteps() []reconcile.Step[*changeScope] {
	return []reconcile.Step[*changeScope]{
		{Name: "release", Run: r.reconcileRelease},
		{Name: "applier", Run: r.reconcileApplier},
		{Name: "current copy", Run: r.reconcileCurrentCopy},
		{Name: "apply lock", Run: r.reconcileApplyLock},
		{Name: "repository", Run: r.reconcileRepository},
		{Name: "apply", Run: r.reconcileApply},
	}
}

// reconcileApplier finds the applier of the change's delivery; without
// one the change stalls.
func (r *ChangeRequestReconciler) reconcileApplier(_ context.Context, s *changeScope) reconcile.Result {
	app, ok := r.Appliers.For(delivery(s.cr))
	if !ok {
		return s.noApplier()
	}
	s.app = app
	return reconcile.Next()
}

// reconcileCurrentCopy makes sure the pass runs on the change as the API
// server has it, before a step with an effect outside the object: a stale
// cache could still show Applying after the result was written (the
// applier is idempotent, but needs not be asked twice), or a verification
// without the measurement the last pass stored (it would query again).
// The copy this reconcile's own write returned is current.
func (r *ChangeRequestReconciler) reconcileCurrentCopy(ctx context.Context, s *changeScope) reconcile.Result {
	if s.stored {
		return reconcile.Next()
	}
	fresh := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.cr), fresh); err != nil {
		return reconcile.Failure(client.IgnoreNotFound(fmt.Errorf("re-read ChangeRequest: %w", err)))
	}
	if fresh.ResourceVersion != s.patch.Original().ResourceVersion {
		// Decide on what is current: it may already be terminal.
		return reconcile.Restart(fresh)
	}
	return reconcile.Next()
}

// reconcileApplyLock makes sure the change holds its release's apply lock
// (taking it over from a holder that ended or is gone), on the Release as
// the API server has it, which the applier is then given.
func (r *ChangeRequestReconciler) reconcileApplyLock(ctx context.Context, s *changeScope) reconcile.Result {
	if rel := s.locked; rel != nil && rel.Status.CurrentChange == s.cr.Name {
		// This reconcile's hand-off read the Release from the API
		// server (or took the lock with a write that returned it) just
		// before it stored Applying; only a live holder's own hand-back
		// frees the lock, so it is still held.
		s.release = rel
		return reconcile.Next()
	}
	rel, held, holder, err := r.acquireLock(ctx, s.cr, true)
	if apierrors.IsConflict(err) {
		// Another writer touched the Release between read and write:
		// look again right away.
		return reconcile.Requeue(reconcile.ConflictRetry)
	}
	if err != nil {
		return reconcile.Failure(err)
	}
	if !held {
		// Only after a manual edit of the lock: wait, never apply two
		// changes of a release at once.
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonWaitingForLock, fmt.Sprintf("waiting for %s to finish applying", holder))
		return reconcile.Requeue(r.lockRetry())
	}
	s.release = rel
	return reconcile.Next()
}

// reconcileRepository loads the release's Repository, which the applier
// reads the change's artifact through; from here on the applier may act.
func (r *ChangeRequestReconciler) reconcileRepository(ctx context.Context, s *changeScope) reconcile.Result {
	rel := s.release
	repo := &sluicev1.Repository{}
	key := client.ObjectKey{Namespace: rel.Namespace, Name: rel.Spec.Repository}
	err := r.Client.Get(ctx, key, repo)
	if apierrors.IsNotFound(err) {
		// The Repository may have moved to another shard while this
		// shard finishes the change holding the lock (the syncer moves
		// the Release only once that ends): read it past the cache.
		err = r.APIReader.Get(ctx, key, repo)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, fmt.Sprintf("waiting for Repository %s", rel.Spec.Repository))
			return reconcile.Requeue(r.lockRetry())
		}
		return reconcile.Failure(fmt.Errorf("get Repository %s: %w", rel.Spec.Repository, err))
	}
	s.repo = repo
	// A lost status write is not followed by a second call in the same
	// reconcile.
	s.applied = true
	return reconcile.Next()
}

// reconcileApply hands the change to its applier and records the result;
// what went wrong is turned into the change's result by outcome.
func (r *ChangeRequestReconciler) reconcileApply(ctx context.Context, s *changeScope) reconcile.Result {
	app, rel := s.app, s.release
	if s.cr.Status.Apply == nil {
		now := metav1.NewTime(r.now())
		s.cr.Status.Apply = &sluicev1.ApplyResult{StartedAt: &now}
	}
	s.cr.Status.Apply.Applier = app.Name()
	start := r.now()
	// The apply continues the trace of the sync (and the webhook delivery)
	// that made the change.
	actx, span := tracer.Start(tracing.Extract(ctx, s.cr.Annotations[tracing.Annotation]), "sluice.apply", trace.WithAttributes(
		attribute.String("sluice.changerequest", s.cr.Namespace+"/"+s.cr.Name), attribute.String("sluice.release", rel.Name),
		attribute.String("sluice.applier", app.Name()), attribute.String("vcs.ref.head.revision", s.cr.Spec.Revision)))
	log.FromContext(ctx).V(1).Info("Applying", "applier", app.Name(), "traceID", tracing.TraceID(actx))
	res, err := app.Apply(actx, applier.Request{Change: s.cr.DeepCopy(), Release: applier.ReleaseOf(rel), Repository: s.repo})
	if err != nil {
		span.SetStatus(codes.Error, truncate(err.Error()))
	}
	span.End()
	took := r.now().Sub(start)
	finished := metav1.NewTime(r.now())
	if err != nil {
		return r.outcome(ctx, s, attempt{app: app, took: took, fail: func(reason, msg string) reconcile.Result {
			return r.applyFailed(s, took, finished, reason, msg)
		}}, err)
	}
	lead := finished.Sub(s.cr.CreationTimestamp.Time)
	applied := s.cr
	s.written = append(s.written, func() {
		r.Metrics.Apply(app.Name(), metrics.ResultApplied, took, lead)
		r.Metrics.ChangeApplied(applied)
	})
	s.cr.Status.Apply.Message = truncate(res.Message)
	s.cr.Status.Apply.HelmRevision = res.HelmRevision
	s.cr.Status.Apply.Terraform = res.Terraform
	s.cr.Status.Apply.FinishedAt = &finished
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionTrue, sluicev1.ReasonSucceeded, res.Message)
	s.setPhase(sluicev1.PhaseApplied, sluicev1.ReasonSucceeded, "applied by the "+app.Name()+" applier")
	return r.startVerification(s)
}

// applyFailed ends an apply as Failed (a permanent failure of the
// applier).
func (r *ChangeRequestReconciler) applyFailed(s *changeScope, took time.Duration, finished metav1.Time, reason, msg string) reconcile.Result {
	name := s.app.Name()
	s.written = append(s.written, func() { r.Metrics.Apply(name, metrics.ResultFailed, took, 0) })
	s.cr.Status.Apply.Message = truncate(msg)
	s.cr.Status.Apply.FinishedAt = &finished
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, reason, msg)
	s.setPhase(sluicev1.PhaseFailed, reason, msg)
	return reconcile.Done()
}

// noApplier stalls a change whose delivery no applier handles: the
// operator runs without it (a flag), which only an administrator changes.
func (s *changeScope) noApplier() reconcile.Result {
	msg := fmt.Sprintf("no applier is registered for delivery %q; the operator must be started with it", delivery(s.cr))
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonNoApplier, msg)
	return reconcile.Stalled(sluicev1.ReasonNoApplier, msg)
}
