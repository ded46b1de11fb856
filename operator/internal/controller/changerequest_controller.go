package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/kit/text"
	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// maxMessage bounds messages copied into status (the API allows 2048).
const maxMessage = 1024

// ChangeRequestReconciler holds ChangeRequests at the approval gate:
// Pending → Rejected | AwaitingApproval → Approved → Applying → Applied |
// Failed, plus Superseded and Preview. Terminal phases never change.
//
// Crash safety: the phase Applying is written, with the release's apply lock
// (Release.status.currentChange) held, before the applier is called, and a
// change found in Applying is handed to the applier again (appliers are
// idempotent per change). Right before the hand-off the change, its
// Approvals, the Release and the ApprovalPolicies are re-read from the API
// server (not the cache) and the gate is checked again.
//
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=changerequests,verbs=get;list;watch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=changerequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=approvals;approvalpolicies;repositories,verbs=get;list;watch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=get;list;watch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=people,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
type ChangeRequestReconciler struct {
	// Client reads from the cache and writes to the API server.
	Client client.Client
	// APIReader reads from the API server directly, for the re-check at
	// the hand-off and for the apply lock.
	APIReader client.Reader
	// Recorder emits an Event on every phase change.
	Recorder events.EventRecorder
	// Appliers maps a delivery mode to its applier.
	Appliers applier.Registry
	// Metrics records sluice_* metrics (nil: none).
	Metrics *metrics.Recorder
	// Now is the clock; time.Now when nil.
	Now func() time.Time
	// LockRetryInterval is how often a change in Applying whose lock a
	// manual edit gave to another live change looks again; 30s when zero.
	// Changes waiting in line for the lock do not poll: the lock moving to
	// them wakes them.
	LockRetryInterval time.Duration
	// BeforeHandOff, when set, is called after the gate passed on cached
	// data and the apply lock was taken, right before the uncached
	// re-check. It is a seam for tests (a decision changing at that very
	// moment); production code leaves it nil.
	BeforeHandOff func(ctx context.Context, cr *sluicev1.ChangeRequest)
}

// changeScope is the state of one reconcile of one ChangeRequest.
type changeScope struct {
	cr       *sluicev1.ChangeRequest
	original *sluicev1.ChangeRequest
	release  *sluicev1.Release
	// phases are the phases entered during this pass, in order; each gets
	// an Event once the status is written.
	phases []phaseChange
	// readyReason and readyMessage are the Ready condition's, set by the
	// steps and written by summarize.
	readyReason, readyMessage string
	// written are metrics of what this pass decided, recorded once the
	// status that records the decision is written: a pass whose write
	// fails is repeated, and must not count twice.
	written []func()
	// handBack: the change holds the apply lock but no longer passes the
	// gate; the lock is handed back once the status is written.
	handBack bool
	// applied: the applier was called in this pass.
	applied bool
	// stored: cr is what the API server returned for this reconcile's
	// own status write, so it is current without reading it again.
	stored bool
}

// phaseChange is one phase entered, with the reason and message of the
// Ready condition at that moment.
type phaseChange struct {
	phase           sluicev1.ChangeRequestPhase
	reason, message string
}

func (r *ChangeRequestReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager watches ChangeRequests, and maps Approvals (by digest),
// Releases, ApprovalPolicies, target Namespaces (labels) and Persons to
// the changes they decide.
func (r *ChangeRequestReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("changerequest").
		For(&sluicev1.ChangeRequest{}, builder.WithPredicates(changeRequestChanged())).
		Watches(&sluicev1.ChangeRequest{}, handler.EnqueueRequestsFromMapFunc(r.olderChangesOfRelease), builder.WithPredicates(createdOnly())).
		Watches(&sluicev1.Approval{}, handler.EnqueueRequestsFromMapFunc(r.changesForApproval), builder.WithPredicates(approvalCreatedOrDeleted())).
		Watches(&sluicev1.Release{}, handler.EnqueueRequestsFromMapFunc(r.changesForRelease), builder.WithPredicates(releaseGateInputsChanged())).
		Watches(&sluicev1.Release{}, handler.EnqueueRequestsFromMapFunc(lockHolder), builder.WithPredicates(releaseLockMoved())).
		Watches(&sluicev1.ApprovalPolicy{}, handler.EnqueueRequestsFromMapFunc(r.changesForPolicy)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.changesForNamespace), builder.WithPredicates(namespaceLabelsChanged())).
		Watches(&sluicev1.Person{}, handler.EnqueueRequestsFromMapFunc(r.changesForPerson)).
		WithOptions(opts).
		Complete(r)
}

// Reconcile moves one ChangeRequest along its phases. It writes the status
// at most once, at the end, and only when it changed; observedGeneration
// and the Ready, Progressing and Stalled conditions are summarised only
// after a pass without error (see summarize).
func (r *ChangeRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cr := &sluicev1.ChangeRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	// A pass that found the cache behind the API server (at the hand-off,
	// before applying, or when its status write lost the race) runs again
	// at once on what the API server returned (bounded), rather than
	// after a short requeue. stored says cr is what the API server
	// returned for this reconcile's own write.
	stored := false
	for range maxRestarts {
		if cr.Status.Phase.IsTerminal() || !cr.DeletionTimestamp.IsZero() {
			// Terminal phases never change; the Release reconciler takes
			// the apply lock from a terminal holder.
			return ctrl.Result{}, nil
		}
		s := &changeScope{cr: cr, original: cr.DeepCopy(), stored: stored}
		stored = false
		res := r.runSteps(ctx, s)
		if fresh, ok := res.restart.(*sluicev1.ChangeRequest); ok {
			cr = fresh
			continue
		}
		if res.err == nil {
			s.summarize(res)
		}
		err := r.patchStatus(ctx, s)
		if apierrors.IsConflict(err) && !s.applied {
			log.FromContext(ctx).V(1).Info("Status write lost a race; deciding again on a fresh copy", "changeRequest", s.cr.Name)
			fresh := &sluicev1.ChangeRequest{}
			if err := r.APIReader.Get(ctx, req.NamespacedName, fresh); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("re-read ChangeRequest after a conflict: %w", err))
			}
			cr = fresh
			continue
		}
		switch {
		case apierrors.IsConflict(err):
			// The applier was called in this pass: it is not called
			// again in the same reconcile.
			return ctrl.Result{RequeueAfter: conflictRetry}, nil
		case err != nil:
			return ctrl.Result{}, kerrors.NewAggregate([]error{res.err, err})
		}
		if s.handBack {
			// Its status is written first, so the Release reconciler
			// does not hand the lock straight back to it.
			if err := r.handBackLock(ctx, s.cr); err != nil {
				return ctrl.Result{}, err
			}
		}
		if res.err == nil && s.enteredApplying() {
			// Applying is stored: apply now, on the copy the API server
			// returned for that write, rather than in a pass of its own.
			cr, stored = s.cr, true
			continue
		}
		return res.result()
	}
	return ctrl.Result{RequeueAfter: conflictRetry}, nil
}

// maxRestarts bounds the passes of one Reconcile on fresher copies.
const maxRestarts = 4

// enteredApplying reports whether this pass moved the change to Applying
// (and, once its status is written, stored it).
func (s *changeScope) enteredApplying() bool {
	return s.cr.Status.Phase == sluicev1.PhaseApplying && s.original.Status.Phase != sluicev1.PhaseApplying
}

// runSteps runs the steps of one pass in order and stops at the first that
// ends it. The order matters:
//
//   - Preview first: a pull-request preview is only shown, whatever else
//     holds.
//   - Release next: every later step needs it (and a Delete change whose
//     Release is already gone is finished here).
//   - Apply before Supersede and Gate: a change in Applying was approved
//     and re-checked at the hand-off and may be half applied; it is
//     finished (or failed) by its applier, never superseded or re-gated
//     half-way.
//   - Supersede before Gate: a change that a newer one overtook ends
//     without asking for approvals or the lock.
//   - Gate before HandOff: only an approved change may take the apply lock,
//     and the hand-off re-checks the gate on fresh data before Applying is
//     written; the applier is called only once Applying is stored (crash
//     safety): in the same reconcile, on the copy that write returned, or
//     in a later pass.
func (r *ChangeRequestReconciler) runSteps(ctx context.Context, s *changeScope) stepResult {
	steps := []func(context.Context, *changeScope) stepResult{
		r.reconcilePreview,
		r.reconcileRelease,
		r.reconcileApply,
		r.reconcileSupersede,
		r.reconcileGate,
		r.reconcileHandOff,
	}
	for _, step := range steps {
		if res := step(ctx, s); res.stop {
			return res
		}
	}
	return done()
}

// summarize sets what a successful pass concluded, once, at its end (as
// Cluster API's patch helper does): observedGeneration, Ready (from the
// phase and the reason the steps gave), Progressing while the change waits
// for another system, and Stalled while only an administrator can help.
// A pass that ended in an error is not summarised: a user can tell a
// processed generation from a failed one.
func (s *changeScope) summarize(res stepResult) {
	cr := s.cr
	switch {
	case res.stalled != nil:
		meta.RemoveStatusCondition(&cr.Status.Conditions, sluicev1.ConditionProgressing)
		s.setCondition(sluicev1.ConditionStalled, metav1.ConditionTrue, res.stalled.Reason, res.stalled.Message)
		s.ready(res.stalled.Reason, res.stalled.Message)
	case res.waiting != nil:
		meta.RemoveStatusCondition(&cr.Status.Conditions, sluicev1.ConditionStalled)
		s.setCondition(sluicev1.ConditionProgressing, metav1.ConditionTrue, res.waiting.Reason, res.waiting.Message)
		s.ready(res.waiting.Reason, res.waiting.Message)
	default:
		meta.RemoveStatusCondition(&cr.Status.Conditions, sluicev1.ConditionStalled)
		meta.RemoveStatusCondition(&cr.Status.Conditions, sluicev1.ConditionProgressing)
	}
	if s.readyReason != "" {
		status := metav1.ConditionFalse
		if cr.Status.Phase == sluicev1.PhaseApplied {
			status = metav1.ConditionTrue
		}
		s.setCondition(sluicev1.ConditionReady, status, s.readyReason, s.readyMessage)
	}
	cr.Status.ObservedGeneration = cr.Generation
}

// setPhase moves the change to a phase and sets the Ready condition.
func (s *changeScope) setPhase(phase sluicev1.ChangeRequestPhase, reason, message string) {
	if s.cr.Status.Phase != phase {
		s.phases = append(s.phases, phaseChange{phase: phase, reason: reason, message: message})
	}
	s.cr.Status.Phase = phase
	s.ready(reason, message)
}

// ready records the reason and message of the Ready condition; summarize
// writes it at the end of a successful pass.
func (s *changeScope) ready(reason, message string) {
	s.readyReason, s.readyMessage = reason, message
}

func (s *changeScope) setCondition(t string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&s.cr.Status.Conditions, metav1.Condition{
		Type:               t,
		Status:             status,
		Reason:             reason,
		Message:            truncate(message),
		ObservedGeneration: s.cr.Generation,
	})
}

// patchStatus writes the status when it changed (merge patch with the
// resourceVersion read, so a concurrent writer makes it fail and the pass
// is retried), then records an Event and a metric per phase entered.
func (r *ChangeRequestReconciler) patchStatus(ctx context.Context, s *changeScope) error {
	if equality.Semantic.DeepEqual(s.original.Status, s.cr.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(s.original, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, s.cr, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("patch status of ChangeRequest %s/%s: %w", s.cr.Namespace, s.cr.Name, err)
	}
	for _, record := range s.written {
		record()
	}
	for _, p := range s.phases {
		r.Metrics.Transition(p.phase)
		r.event(s.cr, p)
	}
	return nil
}

// event records a phase change (action: the phase entered; reason and note:
// why).
func (r *ChangeRequestReconciler) event(cr *sluicev1.ChangeRequest, p phaseChange) {
	if r.Recorder == nil {
		return
	}
	typ := corev1.EventTypeNormal
	if p.phase == sluicev1.PhaseRejected || p.phase == sluicev1.PhaseFailed {
		typ = corev1.EventTypeWarning
	}
	r.Recorder.Eventf(cr, nil, typ, p.reason, string(p.phase), "%s", truncate(fmt.Sprintf("phase %s: %s", p.phase, p.message)))
}

// reconcilePreview ends a pull-request preview: it is shown, never applied.
func (r *ChangeRequestReconciler) reconcilePreview(_ context.Context, s *changeScope) stepResult {
	if pr := s.cr.Spec.PullRequest; pr == nil || !pr.Preview {
		return next()
	}
	s.setPhase(sluicev1.PhasePreview, sluicev1.ReasonPreview, fmt.Sprintf("preview of pull request #%d, never applied", s.cr.Spec.PullRequest.Number))
	return done()
}

// reconcileRelease loads the change's Release; without it the change stays
// Pending until the Release appears (the Release watch wakes it).
func (r *ChangeRequestReconciler) reconcileRelease(ctx context.Context, s *changeScope) stepResult {
	rel := &sluicev1.Release{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.cr.Namespace, Name: s.cr.Spec.Release}, rel)
	if apierrors.IsNotFound(err) {
		if s.cr.IsDelete() && s.cr.Status.Phase == sluicev1.PhaseApplying {
			return r.finishDeleteOfGoneRelease(s)
		}
		if s.cr.Status.Phase == "" {
			s.setPhase(sluicev1.PhasePending, sluicev1.ReasonReleaseNotFound, fmt.Sprintf("Release %s not found", s.cr.Spec.Release))
		} else {
			s.ready(sluicev1.ReasonReleaseNotFound, fmt.Sprintf("Release %s not found", s.cr.Spec.Release))
		}
		return done()
	}
	if err != nil {
		return failed(fmt.Errorf("get Release %s: %w", s.cr.Spec.Release, err))
	}
	s.release = rel
	return next()
}

// reconcileSupersede ends a change that a newer one of the same release
// overtook before it started applying.
func (r *ChangeRequestReconciler) reconcileSupersede(ctx context.Context, s *changeScope) stepResult {
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexRelease: s.cr.Spec.Release}); err != nil {
		return failed(fmt.Errorf("list ChangeRequests of release %s: %w", s.cr.Spec.Release, err))
	}
	newer := newestOtherChange(s.cr, list.Items)
	if newer == nil {
		return next()
	}
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonSuperseded, "superseded by "+newer.Name)
	s.setPhase(sluicev1.PhaseSuperseded, sluicev1.ReasonSuperseded, fmt.Sprintf("ChangeRequest %s for revision %s is newer", newer.Name, newer.Spec.Revision))
	// A superseded change that held the lock without applying loses it to
	// the Release reconciler (a terminal holder).
	return done()
}

// newestOtherChange returns a change of the same release newer than cr
// (see isNewer), ignoring previews, or nil.
func newestOtherChange(cr *sluicev1.ChangeRequest, all []sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	var newest *sluicev1.ChangeRequest
	for i := range all {
		o := &all[i]
		if o.Name == cr.Name || o.Namespace != cr.Namespace || o.Spec.Release != cr.Spec.Release || isPreview(o) {
			continue
		}
		if isNewer(o, cr) && (newest == nil || isNewer(o, newest)) {
			newest = o
		}
	}
	return newest
}

func isPreview(cr *sluicev1.ChangeRequest) bool {
	return cr.Spec.PullRequest != nil && cr.Spec.PullRequest.Preview
}

// isNewer orders the changes of a release: by creation (the syncer creates
// them in commit order), and at the same revision by attempt (a re-plan).
// Changes created in the same second at different revisions are not
// ordered; the apply lock still runs them one at a time.
func isNewer(a, b *sluicev1.ChangeRequest) bool {
	if a.Spec.Revision == b.Spec.Revision {
		return a.Spec.Attempt > b.Spec.Attempt
	}
	return a.CreationTimestamp.After(b.CreationTimestamp.Time)
}

// reconcileGate evaluates the gate on cached data: Rejected, waiting, or
// Approved (then the hand-off follows).
func (r *ChangeRequestReconciler) reconcileGate(ctx context.Context, s *changeScope) stepResult {
	in, err := gateinput.Load(ctx, r.Client, s.cr, s.release)
	if err != nil {
		return failed(err)
	}
	var approvals sluicev1.ApprovalList
	if err := r.Client.List(ctx, &approvals, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexApprovalDigest: string(s.cr.Spec.ApprovalDigest)}); err != nil {
		return failed(fmt.Errorf("list Approvals: %w", err))
	}
	d := r.decide(s, in, approvals.Items)
	if !d.Passed {
		s.setCondition(sluicev1.ConditionApproved, metav1.ConditionFalse, d.Reason, d.Message)
		s.setPhase(d.Phase(), d.Reason, d.Message)
		s.cr.Status.ApprovedAt = nil
		// A change that is not approved must not keep the lock.
		s.handBackIfHeld(s.release)
		return done()
	}
	s.setCondition(sluicev1.ConditionApproved, metav1.ConditionTrue, d.Reason, d.Message)
	if s.cr.Status.Phase != sluicev1.PhaseApproved {
		now := metav1.NewTime(r.now())
		s.cr.Status.ApprovedAt = &now
		wait := now.Sub(s.cr.CreationTimestamp.Time)
		_, span := tracer.Start(tracing.Extract(ctx, s.cr.Annotations[tracing.Annotation]), "sluice.approved", trace.WithAttributes(
			attribute.String("sluice.changerequest", s.cr.Namespace+"/"+s.cr.Name), attribute.String("sluice.gate.reason", d.Reason),
			attribute.StringSlice("sluice.gate.approvers", identities(d.ApprovedBy))))
		span.End()
		s.written = append(s.written, func() { r.Metrics.ApprovalWait(wait) })
	}
	s.setPhase(sluicev1.PhaseApproved, d.Reason, d.Message)
	return next()
}

// decide evaluates the gate on its inputs (see gateinput.Load) and records
// the effective rule and the counted approvers in status.
func (r *ChangeRequestReconciler) decide(s *changeScope, in gate.Inputs, approvals []sluicev1.Approval) gate.Decision {
	d, errs := gate.Decide(in, s.cr, approvals)
	api := d.Rule.API()
	s.cr.Status.EffectiveRule = &api
	s.cr.Status.Approvals = int32(len(d.ApprovedBy))
	s.cr.Status.ApprovedBy = d.ApprovedBy
	s.cr.Status.RejectedBy = d.RejectedBy
	validated := metav1.ConditionTrue
	vReason, vMessage := sluicev1.ReasonPolicyPassed, fmt.Sprintf("verdict %s, risk %s", s.cr.Spec.Verdict.Result, s.cr.Spec.Verdict.Risk)
	if d.Reason == sluicev1.ReasonPolicyDenied || d.Reason == sluicev1.ReasonDigestMismatch {
		validated, vReason, vMessage = metav1.ConditionFalse, d.Reason, d.Message
	}
	if len(errs) > 0 {
		vMessage += "; " + kerrors.NewAggregate(errs).Error()
	}
	s.setCondition(sluicev1.ConditionValidated, validated, vReason, vMessage)
	return d
}

// reconcileHandOff takes the release's apply lock (or waits for it),
// re-checks the gate on fresh data and moves the change to Applying. The
// applier is called only once Applying is stored (see Reconcile).
func (r *ChangeRequestReconciler) reconcileHandOff(ctx context.Context, s *changeScope) stepResult {
	if _, ok := r.Appliers.For(delivery(s.cr)); !ok {
		return s.noApplier()
	}
	// Only a change first in line with the lock free asks the API server
	// for it; the others wait without polling: the Release reconciler
	// hands the lock on, and the lock moving wakes its new holder.
	if !r.mayTakeLock(ctx, s) {
		return s.waitForLock()
	}
	rel, held, _, err := r.acquireLock(ctx, s.cr, false)
	if apierrors.IsConflict(err) || err == nil && !held {
		// Another change or writer was first: wait in line.
		return s.waitForLock()
	}
	if err != nil {
		return failed(err)
	}
	if r.BeforeHandOff != nil {
		r.BeforeHandOff(ctx, s.cr.DeepCopy())
	}

	// The re-check: nothing from the cache.
	fresh := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.cr), fresh); err != nil {
		return failed(fmt.Errorf("re-read ChangeRequest at hand-off: %w", err))
	}
	if fresh.ResourceVersion != s.original.ResourceVersion {
		// The cache is behind: decide again, at once, on what is
		// current (nothing of this pass is written).
		return restartWith(fresh)
	}
	in, err := gateinput.Load(ctx, r.APIReader, fresh, rel)
	if err != nil {
		return failed(fmt.Errorf("re-read the gate's inputs at hand-off: %w", err))
	}
	var all sluicev1.ApprovalList
	if err := r.APIReader.List(ctx, &all, client.InNamespace(s.cr.Namespace)); err != nil {
		return failed(fmt.Errorf("re-read Approvals at hand-off: %w", err))
	}
	var approvals []sluicev1.Approval
	for _, a := range all.Items {
		if a.Spec.ApprovalDigest == fresh.Spec.ApprovalDigest {
			approvals = append(approvals, a)
		}
	}
	s.release = rel
	d := r.decide(s, in, approvals)
	if !d.Passed {
		reason, msg := sluicev1.ReasonGateFailedAtHandOff, "the gate no longer passed at the hand-off: "+d.Message
		if d.Rejected() {
			reason = d.Reason
		}
		s.cr.Status.ApprovedAt = nil
		s.setCondition(sluicev1.ConditionApproved, metav1.ConditionFalse, reason, msg)
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, reason, "not applied")
		s.setPhase(d.Phase(), reason, msg)
		s.handBackIfHeld(rel)
		return done()
	}
	app, _ := r.Appliers.For(delivery(s.cr))
	now := metav1.NewTime(r.now())
	s.cr.Status.Apply = &sluicev1.ApplyResult{Applier: app.Name(), StartedAt: &now}
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, "handed to the "+app.Name()+" applier")
	s.setPhase(sluicev1.PhaseApplying, sluicev1.ReasonApplying, "handed to the "+app.Name()+" applier")
	return done()
}

// waitForLock ends the pass of an approved change waiting for its
// release's apply lock. Nothing is requeued: the lock moving to it wakes it.
func (s *changeScope) waitForLock() stepResult {
	// The message names no holder, so waiting changes are not rewritten
	// each time the lock passes on.
	msg := "waiting for the release's apply lock (Release.status.currentChange)"
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonWaitingForLock, msg)
	s.ready(sluicev1.ReasonWaitingForLock, msg)
	return done()
}

// handBackIfHeld marks the lock for hand-back when the change holds it
// (per rel) and leaves a non-terminal phase; a terminal holder's lock is
// taken by the Release reconciler.
func (s *changeScope) handBackIfHeld(rel *sluicev1.Release) {
	s.handBack = rel != nil && rel.Status.CurrentChange == s.cr.Name && !s.cr.Status.Phase.IsTerminal()
}

// noApplier stalls a change whose delivery no applier handles: the
// operator runs without it (a flag), which only an administrator changes.
func (s *changeScope) noApplier() stepResult {
	msg := fmt.Sprintf("no applier is registered for delivery %q; the operator must be started with it", delivery(s.cr))
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonNoApplier, msg)
	return stalledBy(&applier.Stalled{Reason: sluicev1.ReasonNoApplier, Message: msg})
}

// delivery is the applier a change goes to: for a Delete, the delivery
// the removed release was applied with (spec.deletion.delivery).
func delivery(cr *sluicev1.ChangeRequest) sluicev1.Delivery { return cr.DeliveryOf() }

// reconcileApply calls the applier for a change in Applying: the first
// time, or again after a restart (appliers are idempotent per change).
func (r *ChangeRequestReconciler) reconcileApply(ctx context.Context, s *changeScope) stepResult {
	if s.cr.Status.Phase != sluicev1.PhaseApplying {
		return next()
	}
	app, ok := r.Appliers.For(delivery(s.cr))
	if !ok {
		return s.noApplier()
	}
	// A stale cache could still show Applying after the result was
	// written; the applier is idempotent, but needs not be asked twice.
	// The copy this reconcile's own write returned is current.
	if !s.stored {
		fresh := &sluicev1.ChangeRequest{}
		if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.cr), fresh); err != nil {
			return failed(client.IgnoreNotFound(fmt.Errorf("re-read ChangeRequest before applying: %w", err)))
		}
		if fresh.ResourceVersion != s.original.ResourceVersion {
			// Decide on what is current: it may already be terminal.
			return restartWith(fresh)
		}
	}
	rel, held, holder, err := r.acquireLock(ctx, s.cr, true)
	if apierrors.IsConflict(err) {
		// Another writer touched the Release between read and write:
		// look again right away.
		return requeueAfter(conflictRetry)
	}
	if err != nil {
		return failed(err)
	}
	if !held {
		// Only after a manual edit of the lock: wait, never apply two
		// changes of a release at once.
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonWaitingForLock, fmt.Sprintf("waiting for %s to finish applying", holder))
		return requeueAfter(r.lockRetry())
	}
	repo := &sluicev1.Repository{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Spec.Repository}, repo); err != nil {
		if apierrors.IsNotFound(err) {
			s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, fmt.Sprintf("waiting for Repository %s", rel.Spec.Repository))
			return requeueAfter(r.lockRetry())
		}
		return failed(fmt.Errorf("get Repository %s: %w", rel.Spec.Repository, err))
	}

	// From here on the applier may act: a lost status write is not
	// followed by a second call in the same reconcile.
	s.applied = true
	if s.cr.IsDelete() {
		return r.applyDelete(ctx, s, app, rel, repo)
	}
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
	res, err := app.Apply(actx, applier.Request{Change: s.cr.DeepCopy(), Release: applier.ReleaseOf(rel), Repository: repo})
	if err != nil {
		span.SetStatus(codes.Error, truncate(err.Error()))
	}
	span.End()
	took := r.now().Sub(start)
	finished := metav1.NewTime(r.now())
	w, waiting := applier.AsWaiting(err)
	stalled, isStalled := applier.AsStalled(err)
	switch f, permanent := applier.AsFailure(err); {
	case err == nil:
		lead := finished.Sub(s.cr.CreationTimestamp.Time)
		s.written = append(s.written, func() { r.Metrics.Apply(app.Name(), metrics.ResultApplied, took, lead) })
		s.cr.Status.Apply.Message = truncate(res.Message)
		s.cr.Status.Apply.HelmRevision = res.HelmRevision
		s.cr.Status.Apply.Terraform = res.Terraform
		s.cr.Status.Apply.FinishedAt = &finished
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionTrue, sluicev1.ReasonSucceeded, res.Message)
		s.setPhase(sluicev1.PhaseApplied, sluicev1.ReasonSucceeded, "applied by the "+app.Name()+" applier")
		return done()
	case permanent:
		s.written = append(s.written, func() { r.Metrics.Apply(app.Name(), metrics.ResultFailed, took, 0) })
		reason := f.Reason
		if reason == "" {
			reason = sluicev1.ReasonApplyFailed
		}
		s.cr.Status.Apply.Message = truncate(f.Error())
		s.cr.Status.Apply.FinishedAt = &finished
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, reason, f.Error())
		s.setPhase(sluicev1.PhaseFailed, reason, f.Error())
		return done()
	case waiting:
		// Another system is at work: nothing failed, nothing to count.
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, w.Reason, w.Message)
		log.FromContext(ctx).V(1).Info("Waiting", "applier", app.Name(), "reason", w.Reason, "retryAfter", w.After().String())
		return waitingFor(w)
	case isStalled:
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, stalled.Reason, stalled.Message)
		return stalledBy(stalled)
	case errors.Is(err, context.Canceled):
		// The operator is stopping; the change stays Applying and is
		// handed to the applier again after the restart.
		return failed(err)
	default:
		r.Metrics.Apply(app.Name(), metrics.ResultRetry, took, 0)
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, "apply attempt failed, retrying: "+err.Error())
		return failed(fmt.Errorf("apply %s with the %s applier: %w", s.cr.Name, app.Name(), err))
	}
}

// truncate bounds a status message to maxMessage bytes on a rune boundary.
func truncate(s string) string { return text.Truncate(s, maxMessage-len("…")) }

var tracer = tracing.Tracer("operator")

func identities[T ~string](ids []T) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}
