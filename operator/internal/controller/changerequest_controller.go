package controller

import (
	"context"
	"fmt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/text"
	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
	"github.com/sluice-gitops/sluice/operator/internal/verify"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
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
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=list
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
	// Shard is the shard key served (Options.Shard): an object of another
	// shard, seen while the cache catches up with a move, is left alone.
	Shard string
	// BeforeHandOff, when set, is called after the gate passed on cached
	// data and the apply lock was taken, right before the uncached
	// re-check. It is a seam for tests (a decision changing at that very
	// moment); production code leaves it nil.
	BeforeHandOff func(ctx context.Context, cr *sluicev1.ChangeRequest)
	// Measurer takes the verifications' measurements; Prometheus when
	// nil.
	Measurer verify.Measurer
	// AppliedObjects reads the live copies of the objects a Helm change
	// installed (and names those that are gone), as its Repository's
	// ServiceAccount: a verification's health judges exactly them. Nil:
	// health reads the release's workloads by its instance label.
	AppliedObjects AppliedObjectsFunc
}

// AppliedObjectsFunc reads the live objects change cr of rel installed
// (drift.HelmChecker.AppliedObjects).
type AppliedObjectsFunc func(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, cr *sluicev1.ChangeRequest) (live []*unstructured.Unstructured, missing []string, err error)

// changeScope is the state of one pass over one ChangeRequest.
type changeScope struct {
	cr *sluicev1.ChangeRequest
	// patch holds cr as it was at the start of the pass and writes its
	// status once, at the end.
	patch *reconcile.Helper[*sluicev1.ChangeRequest]
	// summary points at cr's conditions and observedGeneration.
	summary reconcile.Summary
	release *sluicev1.Release
	// app, repo: the applier and the Repository of a change in Applying,
	// loaded by the steps before the applier is called.
	app  applier.Applier
	repo *sluicev1.Repository
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
	// applied: the applier may have acted in this pass; a lost status
	// write is then not followed by a second call in the same reconcile.
	applied bool
	// stored: cr is what the API server returned for this reconcile's
	// own status write, so it is current without reading it again.
	stored bool
	// locked is the Release as this reconcile's hand-off read or wrote
	// it from the API server, holding cr's lock, before that status write
	// stored Applying: the apply that follows in the same reconcile needs
	// not read it again.
	locked *sluicev1.Release
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

// Reconcile moves one ChangeRequest along its phases, in passes (see
// pass): a pass that found the cache behind the API server (at the
// hand-off, before applying, or when its status write lost the race) runs
// again at once on what the API server returned, and so does a pass that
// stored Applying (it applies on the copy its write returned, rather than
// in a reconcile of its own).
func (r *ChangeRequestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cr := &sluicev1.ChangeRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	stored := false
	var locked *sluicev1.Release
	return reconcile.Loop(ctx, cr, func(ctx context.Context, cr *sluicev1.ChangeRequest) reconcile.Result {
		res, wrote, rel := r.pass(ctx, cr, stored, locked)
		stored, locked = wrote, rel
		return res
	})
}

// pass runs the steps for the change's phase (see stepsFor), summarises
// the result and writes the status at most once, only when it changed;
// observedGeneration and the Ready, Progressing and Stalled conditions
// are summarised only after a pass without error. It reports whether a
// Restart runs on the copy its own write returned, and then the Release
// holding the change's lock as the hand-off left it (see changeScope.locked).
func (r *ChangeRequestReconciler) pass(ctx context.Context, cr *sluicev1.ChangeRequest, stored bool, locked *sluicev1.Release) (reconcile.Result, bool, *sluicev1.Release) {
	if cr.Status.Phase.IsTerminal() || !cr.DeletionTimestamp.IsZero() {
		// Terminal phases never change; the Release reconciler takes
		// the apply lock from a terminal holder.
		return reconcile.Done(), false, nil
	}
	if sluicev1.ShardOf(cr) != r.Shard {
		// Moved to another shard (a fresh copy at the hand-off, or the
		// cache not yet caught up): that shard's operator decides it.
		return reconcile.Done(), false, nil
	}
	s := &changeScope{
		cr:      cr,
		patch:   reconcile.NewHelper(r.Client, cr, FieldOwner),
		summary: reconcile.Summary{Conditions: &cr.Status.Conditions, ObservedGeneration: &cr.Status.ObservedGeneration, Generation: cr.Generation, MaxMessage: maxMessage},
		stored:  stored,
	}
	if stored {
		s.locked = locked
	}
	res := reconcile.RunSteps(ctx, s, r.stepsFor(cr))
	if res.Is(reconcile.KindRestart) {
		// Nothing of this pass is written.
		return res, false, nil
	}
	s.summarize(res)
	entered := s.enteredApplying()
	wrote, err := s.patch.Patch(ctx, cr)
	switch {
	case apierrors.IsConflict(err) && s.applied:
		// The applier may have acted in this pass: it is not called
		// again in the same reconcile.
		return reconcile.Requeue(reconcile.ConflictRetry), false, nil
	case err != nil:
		return reconcile.Settle(ctx, r.APIReader, cr, res, err), false, nil
	case wrote:
		r.recordWritten(s)
	}
	if s.handBack {
		// Its status is written first, so the Release reconciler does
		// not hand the lock straight back to it.
		if err := r.handBackLock(ctx, cr); err != nil {
			return reconcile.Failure(err), false, nil
		}
	}
	if !res.Is(reconcile.KindFailure) && entered {
		// Applying is stored: apply now, on the copy the API server
		// returned for that write, with the Release the hand-off read.
		return reconcile.Restart(cr), true, s.locked
	}
	return res, false, nil
}

// stepsFor is the ordered list of steps of one pass, chosen at the top by
// what the change is doing:
//
//   - not applying yet: the gate. Preview first (a pull-request preview is
//     only shown, whatever else holds); the Release next (every later step
//     needs it); Supersede before Gate (a change that a newer one
//     overtook ends without asking for approvals or the lock); Gate
//     before HandOff (only an approved change may take the apply lock,
//     and the hand-off re-checks the gate on fresh data before Applying
//     is written).
//   - Applying: the apply (apply.go). The change was approved and
//     re-checked at the hand-off and may be half applied: it is finished
//     (or failed) by its applier, never superseded or re-gated half-way.
//     The applier is called only once Applying is stored (crash safety):
//     in the same reconcile, on the copy that write returned, or in a
//     later pass.
//   - Applying a Delete change: its own steps (delete.go), in reverse
//     order of an apply.
//   - Verifying: the verification (verification.go), which keeps the
//     apply lock until it ends.
func (r *ChangeRequestReconciler) stepsFor(cr *sluicev1.ChangeRequest) []reconcile.Step[*changeScope] {
	switch {
	case cr.Status.Phase == sluicev1.PhaseVerifying:
		return r.verifySteps()
	case cr.Status.Phase != sluicev1.PhaseApplying:
		return []reconcile.Step[*changeScope]{
			{Name: "preview", Run: r.reconcilePreview},
			{Name: "release", Run: r.reconcileRelease},
			{Name: "supersede", Run: r.reconcileSupersede},
			{Name: "gate", Run: r.reconcileGate},
			{Name: "hand-off", Run: r.reconcileHandOff},
		}
	case cr.IsDelete():
		return r.deleteSteps()
	}
	return r.applySteps()
}

// summarize sets what a pass concluded, once, at its end (see
// reconcile.Summary.Conclude): observedGeneration, Ready (from the phase
// and the reason the steps gave), Progressing while the change waits for
// another system, and Stalled while only an administrator can help. A
// pass that ended in an error is not summarised: a user can tell a
// processed generation from a failed one.
func (s *changeScope) summarize(res reconcile.Result) {
	ready := reconcile.Ready{Status: metav1.ConditionFalse, Reason: s.readyReason, Message: s.readyMessage}
	if p := s.cr.Status.Phase; p == sluicev1.PhaseApplied || p == sluicev1.PhaseVerified {
		ready.Status = metav1.ConditionTrue
	}
	s.summary.Conclude(res, ready)
}

// enteredApplying reports whether this pass moved the change to Applying
// (and, once its status is written, stored it).
func (s *changeScope) enteredApplying() bool {
	return s.cr.Status.Phase == sluicev1.PhaseApplying && s.patch.Original().Status.Phase != sluicev1.PhaseApplying
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

// setCondition sets a condition of the change (message bounded).
func (s *changeScope) setCondition(t string, status metav1.ConditionStatus, reason, message string) {
	s.summary.Set(t, status, reason, message)
}

// recordWritten records, once the status is written, the metrics of what
// the pass decided and an Event and a metric per phase entered.
func (r *ChangeRequestReconciler) recordWritten(s *changeScope) {
	for _, record := range s.written {
		record()
	}
	for _, p := range s.phases {
		r.Metrics.Transition(p.phase)
		r.event(s.cr, p)
	}
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
func (r *ChangeRequestReconciler) reconcilePreview(_ context.Context, s *changeScope) reconcile.Result {
	if pr := s.cr.Spec.PullRequest; pr == nil || !pr.Preview {
		return reconcile.Next()
	}
	s.setPhase(sluicev1.PhasePreview, sluicev1.ReasonPreview, fmt.Sprintf("preview of pull request #%d, never applied", s.cr.Spec.PullRequest.Number))
	return reconcile.Done()
}

// reconcileRelease loads the change's Release; without it the change stays
// Pending until the Release appears (the Release watch wakes it).
func (r *ChangeRequestReconciler) reconcileRelease(ctx context.Context, s *changeScope) reconcile.Result {
	rel := &sluicev1.Release{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.cr.Namespace, Name: s.cr.Spec.Release}, rel)
	if apierrors.IsNotFound(err) {
		msg := fmt.Sprintf("Release %s not found", s.cr.Spec.Release)
		if s.cr.Status.Phase == "" {
			s.setPhase(sluicev1.PhasePending, sluicev1.ReasonReleaseNotFound, msg)
		} else {
			s.ready(sluicev1.ReasonReleaseNotFound, msg)
		}
		return reconcile.Done()
	}
	if err != nil {
		return reconcile.Failure(fmt.Errorf("get Release %s: %w", s.cr.Spec.Release, err))
	}
	s.release = rel
	return reconcile.Next()
}

// reconcileSupersede ends a change that a newer one of the same release
// overtook before it started applying.
func (r *ChangeRequestReconciler) reconcileSupersede(ctx context.Context, s *changeScope) reconcile.Result {
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexRelease: s.cr.Spec.Release}); err != nil {
		return reconcile.Failure(fmt.Errorf("list ChangeRequests of release %s: %w", s.cr.Spec.Release, err))
	}
	newer := newestOtherChange(s.cr, list.Items)
	if newer == nil {
		return reconcile.Next()
	}
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonSuperseded, "superseded by "+newer.Name)
	s.setPhase(sluicev1.PhaseSuperseded, sluicev1.ReasonSuperseded, fmt.Sprintf("ChangeRequest %s for revision %s is newer", newer.Name, newer.Spec.Revision))
	// A superseded change that held the lock without applying loses it to
	// the Release reconciler (a terminal holder).
	return reconcile.Done()
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

// delivery is the applier a change goes to: for a Delete, the delivery
// the removed release was applied with (spec.deletion.delivery).
func delivery(cr *sluicev1.ChangeRequest) sluicev1.Delivery { return cr.DeliveryOf() }

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
