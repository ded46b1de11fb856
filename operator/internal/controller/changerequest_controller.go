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

	"github.com/sluice-gitops/sluice/operator/api/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// conflictRetry is how soon a pass that lost an optimistic-concurrency race
// for the apply lock runs again.
const conflictRetry = 100 * time.Millisecond

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
	// LockRetryInterval is how often a change waiting for the apply lock
	// looks again; 30s when zero.
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
	// written are metrics of what this pass decided, recorded once the
	// status that records the decision is written: a pass whose write
	// fails is repeated, and must not count twice.
	written []func()
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
		Watches(&sluicev1.ApprovalPolicy{}, handler.EnqueueRequestsFromMapFunc(r.changesForPolicy)).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.changesForNamespace), builder.WithPredicates(namespaceLabelsChanged())).
		Watches(&sluicev1.Person{}, handler.EnqueueRequestsFromMapFunc(r.changesForPerson)).
		WithOptions(opts).
		Complete(r)
}

// Reconcile moves one ChangeRequest along its phases. It writes the status
// at most once, at the end, and only when it changed.
func (r *ChangeRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	cr := &sluicev1.ChangeRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if cr.Status.Phase.IsTerminal() {
		// Terminal phases never change; only the release's lock may
		// still have to be handed back.
		return r.reconcileTerminal(ctx, cr)
	}
	if !cr.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}

	s := &changeScope{cr: cr, original: cr.DeepCopy()}
	defer func() {
		err := r.patchStatus(ctx, s)
		switch {
		case apierrors.IsConflict(err):
			// The cache was behind the API server; run again once it
			// caught up, without growing the error backoff.
			log.FromContext(ctx).V(1).Info("Status write lost a race; retrying", "changeRequest", s.cr.Name)
			result = ctrl.Result{RequeueAfter: conflictRetry}
		case err != nil:
			retErr = kerrors.NewAggregate([]error{retErr, err})
		}
	}()

	steps := []func(context.Context, *changeScope) (ctrl.Result, bool, error){
		r.reconcilePreview,
		r.reconcileRelease,
		r.reconcileApply,
		r.reconcileSupersede,
		r.reconcileGate,
		r.reconcileHandOff,
	}
	for _, step := range steps {
		res, done, err := step(ctx, s)
		if err != nil || done {
			return res, err
		}
	}
	return ctrl.Result{}, nil
}

// setPhase moves the change to a phase and sets the Ready condition.
func (s *changeScope) setPhase(phase sluicev1.ChangeRequestPhase, reason, message string) {
	if s.cr.Status.Phase != phase {
		s.phases = append(s.phases, phaseChange{phase: phase, reason: reason, message: message})
	}
	s.cr.Status.Phase = phase
	status := metav1.ConditionFalse
	if phase == sluicev1.PhaseApplied {
		status = metav1.ConditionTrue
	}
	s.setCondition(sluicev1.ConditionReady, status, reason, message)
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
	s.cr.Status.ObservedGeneration = s.cr.Generation
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
func (r *ChangeRequestReconciler) reconcilePreview(_ context.Context, s *changeScope) (ctrl.Result, bool, error) {
	if pr := s.cr.Spec.PullRequest; pr == nil || !pr.Preview {
		return ctrl.Result{}, false, nil
	}
	s.setPhase(sluicev1.PhasePreview, sluicev1.ReasonPreview, fmt.Sprintf("preview of pull request #%d, never applied", s.cr.Spec.PullRequest.Number))
	return ctrl.Result{}, true, nil
}

// reconcileRelease loads the change's Release; without it the change stays
// Pending until the Release appears (the Release watch wakes it).
func (r *ChangeRequestReconciler) reconcileRelease(ctx context.Context, s *changeScope) (ctrl.Result, bool, error) {
	rel := &sluicev1.Release{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.cr.Namespace, Name: s.cr.Spec.Release}, rel)
	if apierrors.IsNotFound(err) {
		if s.cr.IsDelete() && s.cr.Status.Phase == sluicev1.PhaseApplying {
			return r.finishDeleteOfGoneRelease(s)
		}
		if s.cr.Status.Phase == "" {
			s.setPhase(sluicev1.PhasePending, sluicev1.ReasonReleaseNotFound, fmt.Sprintf("Release %s not found", s.cr.Spec.Release))
		} else {
			s.setCondition(sluicev1.ConditionReady, metav1.ConditionFalse, sluicev1.ReasonReleaseNotFound, fmt.Sprintf("Release %s not found", s.cr.Spec.Release))
		}
		return ctrl.Result{}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, true, fmt.Errorf("get Release %s: %w", s.cr.Spec.Release, err)
	}
	s.release = rel
	return ctrl.Result{}, false, nil
}

// reconcileSupersede ends a change that a newer one of the same release
// overtook before it started applying.
func (r *ChangeRequestReconciler) reconcileSupersede(ctx context.Context, s *changeScope) (ctrl.Result, bool, error) {
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexRelease: s.cr.Spec.Release}); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("list ChangeRequests of release %s: %w", s.cr.Spec.Release, err)
	}
	newer := newestOtherChange(s.cr, list.Items)
	if newer == nil {
		return ctrl.Result{}, false, nil
	}
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonSuperseded, "superseded by "+newer.Name)
	s.setPhase(sluicev1.PhaseSuperseded, sluicev1.ReasonSuperseded, fmt.Sprintf("ChangeRequest %s for revision %s is newer", newer.Name, newer.Spec.Revision))
	// A change that held the lock without applying hands it back next pass.
	return ctrl.Result{}, true, nil
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
func (r *ChangeRequestReconciler) reconcileGate(ctx context.Context, s *changeScope) (ctrl.Result, bool, error) {
	in, err := gateinput.Load(ctx, r.Client, s.cr, s.release)
	if err != nil {
		return ctrl.Result{}, true, err
	}
	var approvals sluicev1.ApprovalList
	if err := r.Client.List(ctx, &approvals, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexApprovalDigest: string(s.cr.Spec.ApprovalDigest)}); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("list Approvals: %w", err)
	}
	d := r.decide(s, in, approvals.Items)
	if !d.Passed {
		s.setCondition(sluicev1.ConditionApproved, metav1.ConditionFalse, d.Reason, d.Message)
		s.setPhase(d.Phase(), d.Reason, d.Message)
		s.cr.Status.ApprovedAt = nil
		// A change that is not approved must not keep the lock.
		return r.handBackLockResult(ctx, s.cr, s.release)
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
	return ctrl.Result{}, false, nil
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

// reconcileHandOff takes the release's apply lock, re-checks the gate on
// fresh data and moves the change to Applying. The applier is called on
// the next pass, once Applying is stored.
func (r *ChangeRequestReconciler) reconcileHandOff(ctx context.Context, s *changeScope) (ctrl.Result, bool, error) {
	if _, ok := r.Appliers.For(delivery(s.cr)); !ok {
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonNoApplier, fmt.Sprintf("no applier is registered for delivery %q", delivery(s.cr)))
		return ctrl.Result{}, true, nil
	}
	var (
		rel  *sluicev1.Release
		held bool
		err  error
	)
	// While the cache shows another live change holding the lock, wait
	// without asking the API server (the Release watch wakes us).
	if !r.lockBusyInCache(ctx, s) {
		rel, held, _, err = r.acquireLock(ctx, s.cr)
	}
	if apierrors.IsConflict(err) {
		// Another writer touched the Release between read and write:
		// look again right away.
		return ctrl.Result{RequeueAfter: conflictRetry}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if !held {
		// The message names no holder, so waiting changes are not
		// rewritten each time the lock passes on.
		msg := "waiting for the release's apply lock (Release.status.currentChange)"
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonWaitingForLock, msg)
		s.setCondition(sluicev1.ConditionReady, metav1.ConditionFalse, sluicev1.ReasonWaitingForLock, msg)
		return ctrl.Result{RequeueAfter: r.lockRetry()}, true, nil
	}
	if r.BeforeHandOff != nil {
		r.BeforeHandOff(ctx, s.cr.DeepCopy())
	}

	// The re-check: nothing from the cache.
	fresh := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.cr), fresh); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("re-read ChangeRequest at hand-off: %w", err)
	}
	if fresh.ResourceVersion != s.original.ResourceVersion {
		// The cache is behind: decide again on what is current.
		s.cr.Status = *s.original.Status.DeepCopy()
		s.phases = nil
		return ctrl.Result{RequeueAfter: conflictRetry}, true, nil
	}
	in, err := gateinput.Load(ctx, r.APIReader, fresh, rel)
	if err != nil {
		return ctrl.Result{}, true, fmt.Errorf("re-read the gate's inputs at hand-off: %w", err)
	}
	var all sluicev1.ApprovalList
	if err := r.APIReader.List(ctx, &all, client.InNamespace(s.cr.Namespace)); err != nil {
		return ctrl.Result{}, true, fmt.Errorf("re-read Approvals at hand-off: %w", err)
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
		return r.handBackLockResult(ctx, s.cr, rel)
	}
	app, _ := r.Appliers.For(delivery(s.cr))
	now := metav1.NewTime(r.now())
	s.cr.Status.Apply = &sluicev1.ApplyResult{Applier: app.Name(), StartedAt: &now}
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, "handed to the "+app.Name()+" applier")
	s.setPhase(sluicev1.PhaseApplying, sluicev1.ReasonApplying, "handed to the "+app.Name()+" applier")
	return ctrl.Result{}, true, nil
}

// lockBusyInCache reports whether the cached Release shows the apply lock
// held by another change that the cache shows as live. It is only a hint
// that saves API calls while many changes wait; taking the lock always
// reads the Release from the API server.
func (r *ChangeRequestReconciler) lockBusyInCache(ctx context.Context, s *changeScope) bool {
	holder := s.release.Status.CurrentChange
	if holder == "" || holder == s.cr.Name {
		return false
	}
	other := &sluicev1.ChangeRequest{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.cr.Namespace, Name: holder}, other); err != nil {
		return false
	}
	return !other.Status.Phase.IsTerminal()
}

func (r *ChangeRequestReconciler) lockRetry() time.Duration {
	if r.LockRetryInterval > 0 {
		return r.LockRetryInterval
	}
	return 30 * time.Second
}

func delivery(cr *sluicev1.ChangeRequest) sluicev1.Delivery { return cr.Delivery() }

// reconcileApply calls the applier for a change in Applying: the first
// time, or again after a restart (appliers are idempotent per change).
func (r *ChangeRequestReconciler) reconcileApply(ctx context.Context, s *changeScope) (ctrl.Result, bool, error) {
	if s.cr.Status.Phase != sluicev1.PhaseApplying {
		return ctrl.Result{}, false, nil
	}
	app, ok := r.Appliers.For(delivery(s.cr))
	if !ok {
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonNoApplier, fmt.Sprintf("no applier is registered for delivery %q", delivery(s.cr)))
		return ctrl.Result{}, true, nil
	}
	// A stale cache could still show Applying after the result was
	// written; the applier is idempotent, but needs not be asked twice.
	fresh := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.cr), fresh); err != nil {
		return ctrl.Result{}, true, client.IgnoreNotFound(fmt.Errorf("re-read ChangeRequest before applying: %w", err))
	}
	if fresh.ResourceVersion != s.original.ResourceVersion {
		return ctrl.Result{RequeueAfter: conflictRetry}, true, nil
	}
	rel, held, holder, err := r.acquireLock(ctx, s.cr)
	if apierrors.IsConflict(err) {
		// Another writer touched the Release between read and write:
		// look again right away.
		return ctrl.Result{RequeueAfter: conflictRetry}, true, nil
	}
	if err != nil {
		return ctrl.Result{}, true, err
	}
	if !held {
		// Only after a manual edit of the lock: wait, never apply two
		// changes of a release at once.
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonWaitingForLock, fmt.Sprintf("waiting for %s to finish applying", holder))
		return ctrl.Result{RequeueAfter: r.lockRetry()}, true, nil
	}
	repo := &sluicev1.Repository{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Spec.Repository}, repo); err != nil {
		if apierrors.IsNotFound(err) {
			s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, fmt.Sprintf("waiting for Repository %s", rel.Spec.Repository))
			return ctrl.Result{RequeueAfter: r.lockRetry()}, true, nil
		}
		return ctrl.Result{}, true, fmt.Errorf("get Repository %s: %w", rel.Spec.Repository, err)
	}

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
	res, err := app.Apply(actx, applier.Request{Change: s.cr.DeepCopy(), Release: rel, Repository: repo})
	if err != nil {
		span.SetStatus(codes.Error, truncate(err.Error()))
	}
	span.End()
	took := r.now().Sub(start)
	finished := metav1.NewTime(r.now())
	switch f, permanent := applier.AsFailure(err); {
	case err == nil:
		lead := finished.Sub(s.cr.CreationTimestamp.Time)
		s.written = append(s.written, func() { r.Metrics.Apply(app.Name(), metrics.ResultApplied, took, lead) })
		s.cr.Status.Apply.Message = truncate(res.Message)
		s.cr.Status.Apply.HelmRevision = res.HelmRevision
		s.cr.Status.Apply.FinishedAt = &finished
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionTrue, sluicev1.ReasonSucceeded, res.Message)
		s.setPhase(sluicev1.PhaseApplied, sluicev1.ReasonSucceeded, "applied by the "+app.Name()+" applier")
		return ctrl.Result{}, true, nil
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
		return ctrl.Result{}, true, nil
	case errors.Is(err, context.Canceled):
		// The operator is stopping; the change stays Applying and is
		// handed to the applier again after the restart.
		return ctrl.Result{}, true, err
	default:
		r.Metrics.Apply(app.Name(), metrics.ResultRetry, took, 0)
		s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, "apply attempt failed, retrying: "+err.Error())
		return ctrl.Result{}, true, fmt.Errorf("apply %s with the %s applier: %w", s.cr.Name, app.Name(), err)
	}
}

// reconcileTerminal hands the apply lock back once a change that held it is
// terminal, recording an applied change on the Release in the same write.
func (r *ChangeRequestReconciler) reconcileTerminal(ctx context.Context, cr *sluicev1.ChangeRequest) (ctrl.Result, error) {
	rel := &sluicev1.Release{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: cr.Spec.Release}, rel); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	res, _, err := r.handBackLockResult(ctx, cr, rel)
	return res, err
}

// handBackLockResult hands the lock back and turns a lost race into a
// quick retry instead of an error with growing backoff.
func (r *ChangeRequestReconciler) handBackLockResult(ctx context.Context, cr *sluicev1.ChangeRequest, rel *sluicev1.Release) (ctrl.Result, bool, error) {
	err := r.handBackLock(ctx, cr, rel)
	if apierrors.IsConflict(err) {
		return ctrl.Result{RequeueAfter: conflictRetry}, true, nil
	}
	return ctrl.Result{}, true, err
}

// handBackLock clears Release.status.currentChange when cr holds it (per
// rel), with an optimistic-concurrency patch.
func (r *ChangeRequestReconciler) handBackLock(ctx context.Context, cr *sluicev1.ChangeRequest, rel *sluicev1.Release) error {
	if rel == nil || rel.Status.CurrentChange != cr.Name {
		return nil
	}
	orig := rel.DeepCopy()
	releaseLock(rel, cr)
	if err := r.Client.Status().Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("hand back the apply lock of Release %s: %w", rel.Name, err)
	}
	return nil
}

// releaseLock clears the lock held by cr on rel (in memory) and, when cr
// was applied, records it as the release's applied change with its
// effective rule, so the next change is judged by it.
func releaseLock(rel *sluicev1.Release, cr *sluicev1.ChangeRequest) {
	if rel.Status.CurrentChange == cr.Name {
		rel.Status.CurrentChange = ""
	}
	if cr.Status.Phase == sluicev1.PhaseApplied {
		recordApplied(rel, cr)
	}
}

// recordApplied records cr as the release's applied change. The applied
// rule is the rule in the change's own manifest, not its effective rule: a
// push that loosens the rule still needed the old, stricter rule to get
// here (so it never loosened it for itself), and from now on its rule is
// the one in force. ApprovalPolicy floors are not frozen into it; they are
// re-read for every change, so lowering a floor takes effect too.
func recordApplied(rel *sluicev1.Release, cr *sluicev1.ChangeRequest) {
	rel.Status.AppliedChange = cr.Name
	rel.Status.AppliedRevision = cr.Spec.Revision
	rel.Status.AppliedDigest = cr.Spec.ApprovalDigest
	rel.Status.AppliedRule = cr.Spec.Rule.DeepCopy()
	rel.Status.AppliedTargetNamespace = cr.Spec.TargetNamespace
}

// acquireLock takes the release's apply lock for cr with an
// optimistic-concurrency patch of Release.status.currentChange, reading the
// Release from the API server. A lock held by a change that is gone or
// terminal is taken over (recording that change first). It returns the
// fresh Release, whether cr holds the lock, and otherwise who does.
func (r *ChangeRequestReconciler) acquireLock(ctx context.Context, cr *sluicev1.ChangeRequest) (*sluicev1.Release, bool, string, error) {
	rel := &sluicev1.Release{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: cr.Spec.Release}, rel); err != nil {
		return nil, false, "", fmt.Errorf("get Release %s for the apply lock: %w", cr.Spec.Release, err)
	}
	holder := rel.Status.CurrentChange
	if holder == cr.Name {
		return rel, true, "", nil
	}
	orig := rel.DeepCopy()
	if holder != "" {
		other := &sluicev1.ChangeRequest{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: holder}, other)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, false, "", fmt.Errorf("get lock holder %s: %w", holder, err)
		case other.Status.Phase.IsTerminal():
			releaseLock(rel, other)
		default:
			return rel, false, holder, nil
		}
	}
	rel.Status.CurrentChange = cr.Name
	if err := r.Client.Status().Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
		return nil, false, "", fmt.Errorf("take the apply lock of Release %s: %w", rel.Name, err)
	}
	log.FromContext(ctx).V(1).Info("Took the apply lock", "release", rel.Name)
	return rel, true, "", nil
}

// truncate bounds a status message to maxMessage bytes on a rune boundary.
func truncate(s string) string { return sluicev1.Truncate(s, maxMessage-len("…")) }

var tracer = tracing.Tracer("operator")

func identities[T ~string](ids []T) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}
