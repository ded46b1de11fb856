package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
)

// MaxHistory is the number of terminal changes kept in Release.status.history.
const MaxHistory = 20

// ReleaseReconciler summarises a Release from its ChangeRequests (Ready,
// Progressing, Degraded, the applied change and rule, a short history),
// deletes old terminal ChangeRequests beyond the newest KeepChangeRequests
// and Approvals that no remaining change needs, repairs an apply lock left
// by a finished or deleted change, and on deletion runs the applier's
// cleanup before letting the Release go.
//
// It never touches the syncer's status fields (lastSyncedTree,
// lastSyncedCommit, latestChange, the Synced condition): its status write is
// a merge patch of its own fields carrying the resourceVersion read.
//
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases/finalizers,verbs=update
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=changerequests;approvals,verbs=get;list;watch;delete
type ReleaseReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	Appliers  applier.Registry
	// KeepChangeRequests per Release; 20 when zero.
	KeepChangeRequests int
	// ApprovalGracePeriod before an orphaned Approval is deleted; 10m when
	// zero. It keeps an Approval given just before its ChangeRequest is
	// created (a ChangeRequest only missing from the cache is caught by a
	// live read).
	ApprovalGracePeriod time.Duration
	// LockRetryInterval is how often a lock held by a live change that is
	// not one of the release's own (a manual edit) is looked at again;
	// 30s when zero.
	LockRetryInterval time.Duration
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

type releaseScope struct {
	rel      *sluicev1.Release
	original *sluicev1.Release
	changes  []sluicev1.ChangeRequest // newest first
	// all are the changes before retention deleted the oldest.
	all []sluicev1.ChangeRequest
}

func (r *ReleaseReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// SetupWithManager watches Releases, the phase changes of their
// ChangeRequests and new Approvals.
func (r *ReleaseReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("release").
		For(&sluicev1.Release{}, builder.WithPredicates(releaseChanged())).
		Watches(&sluicev1.Release{}, summarizeLater(self, lockFreed), builder.WithPredicates(releaseLockChanged())).
		Watches(&sluicev1.ChangeRequest{}, summarizeLater(releaseOf, r.lockMayMove), builder.WithPredicates(changePhaseChanged())).
		Watches(&sluicev1.Approval{}, handler.EnqueueRequestsFromMapFunc(releaseOf), builder.WithPredicates(createdOnly())).
		WithOptions(opts).
		Complete(r)
}

// releaseOf maps a ChangeRequest or an Approval to its Release.
func releaseOf(_ context.Context, o client.Object) []reconcile.Request {
	var name string
	switch x := o.(type) {
	case *sluicev1.ChangeRequest:
		name = x.Spec.Release
	case *sluicev1.Approval:
		name = x.Spec.Release
	}
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

// SummaryDelay is how long the Release reconciler lets the phase changes
// of a release's ChangeRequests and its lock hand-overs gather before it
// summarises them: a burst of changes is one status write, not one each.
// Events that may move the apply lock (see lockMayMove and lockFreed) are
// not delayed: the lock is handed on at once, and the summary is written
// in the same write.
const SummaryDelay = time.Second

// summarizeLater enqueues the Releases fn maps an object to: at once when
// urgent says the event may move the apply lock, else after SummaryDelay.
// The queue keeps one entry per Release, at the earliest time asked for.
func summarizeLater(fn handler.MapFunc, urgent func(ctx context.Context, o client.Object, deleted bool) bool) handler.EventHandler {
	add := func(ctx context.Context, o client.Object, deleted bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if o == nil {
			return
		}
		now := urgent(ctx, o, deleted)
		for _, req := range fn(ctx, o) {
			if now {
				q.Add(req)
			} else {
				q.AddAfter(req, SummaryDelay)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, false, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.ObjectNew, false, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, true, q)
		},
	}
}

// lockMayMove reports whether a ChangeRequest event may let its release's
// apply lock move, per the cached Release: the change was approved while
// the lock is free, or the holder ended or was deleted. Other phase
// changes (and these, should the cache be behind) are summarised after
// SummaryDelay, which hands the lock on too.
func (r *ReleaseReconciler) lockMayMove(ctx context.Context, o client.Object, deleted bool) bool {
	cr, ok := o.(*sluicev1.ChangeRequest)
	if !ok {
		return false
	}
	rel := &sluicev1.Release{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: cr.Spec.Release}, rel); err != nil {
		return false
	}
	switch holder := rel.Status.CurrentChange; {
	case holder == "":
		return cr.Status.Phase == sluicev1.PhaseApproved
	case holder == cr.Name:
		return deleted || cr.Status.Phase.IsTerminal()
	}
	return false
}

// lockFreed reports whether a Release's apply lock is free: a change
// waiting in line may take it.
func lockFreed(_ context.Context, o client.Object, _ bool) bool {
	rel, ok := o.(*sluicev1.Release)
	return ok && rel.Status.CurrentChange == ""
}

// self maps a Release to itself.
func self(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
}

// releaseLockChanged passes updates of the lock and change fields of a
// Release's status (summarised after SummaryDelay).
func releaseLockChanged() predicate.Predicate {
	return updates(false, func(o, n *sluicev1.Release) bool {
		return o.Status.CurrentChange != n.Status.CurrentChange ||
			o.Status.AppliedChange != n.Status.AppliedChange ||
			o.Status.LatestChange != n.Status.LatestChange
	})
}

// releaseChanged passes what needs the Release reconciler at once:
// creation, a new generation, deletion and finalizers. The lock and change
// fields of its status are summarised a moment later (releaseLockChanged);
// the syncer's lastSyncedTree and condition-only writes are skipped.
func releaseChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*sluicev1.Release)
			n, ok2 := e.ObjectNew.(*sluicev1.Release)
			if !ok1 || !ok2 {
				return true
			}
			return o.Generation != n.Generation ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
				!slices.Equal(o.Finalizers, n.Finalizers)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// changePhaseChanged passes a ChangeRequest's creation, deletion and every
// phase change (never hidden).
func changePhaseChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*sluicev1.ChangeRequest)
			n, ok2 := e.ObjectNew.(*sluicev1.ChangeRequest)
			return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// Reconcile summarises one Release and prunes its old changes.
func (r *ReleaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rel := &sluicev1.Release{}
	if err := r.Client.Get(ctx, req.NamespacedName, rel); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !rel.DeletionTimestamp.IsZero() {
		return r.reconcileDelete(ctx, rel)
	}
	if !controllerutil.ContainsFinalizer(rel, sluicev1.ReleaseFinalizer) {
		orig := rel.DeepCopy()
		controllerutil.AddFinalizer(rel, sluicev1.ReleaseFinalizer)
		if err := r.Client.Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer to Release %s: %w", rel.Name, err)
		}
	}

	// A status write that lost a race (the syncer, a change taking the
	// lock, or a cache behind) runs the pass again at once on the
	// Release as the API server has it (bounded), rather than after a
	// short requeue.
	for range maxRestarts {
		s := &releaseScope{rel: rel, original: rel.DeepCopy()}
		result, err := r.reconcileSteps(ctx, s)
		if err == nil {
			// Summarised once, at the end of a successful pass.
			r.reconcileConditions(s)
			s.rel.Status.ObservedGeneration = s.rel.Generation
		}
		perr := r.patchStatus(ctx, s)
		if apierrors.IsConflict(perr) {
			fresh := &sluicev1.Release{}
			if err := r.APIReader.Get(ctx, req.NamespacedName, fresh); err != nil {
				return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("re-read Release after a conflict: %w", err))
			}
			if !fresh.DeletionTimestamp.IsZero() {
				return r.reconcileDelete(ctx, fresh)
			}
			rel = fresh
			continue
		}
		if perr != nil {
			return ctrl.Result{}, kerrors.NewAggregate([]error{err, perr})
		}
		return result, err
	}
	return ctrl.Result{RequeueAfter: conflictRetry}, nil
}

// reconcileSteps runs the steps of one pass: the lock repair first (the
// applied change it records feeds the rest), then the applied change, the
// history, and the clean-ups that delete objects last.
func (r *ReleaseReconciler) reconcileSteps(ctx context.Context, s *releaseScope) (ctrl.Result, error) {
	rel := s.rel
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(rel.Namespace), client.MatchingFields{IndexRelease: rel.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list ChangeRequests of Release %s: %w", rel.Name, err)
	}
	s.changes = list.Items
	slices.SortFunc(s.changes, newestFirst)
	s.all = s.changes

	lockResult, err := r.reconcileLock(ctx, s)
	if err != nil {
		return ctrl.Result{}, err
	}
	r.reconcileApplied(s)
	r.reconcileHistory(s)
	if err := r.reconcileRetention(ctx, s); err != nil {
		return ctrl.Result{}, err
	}
	result, err := r.reconcileApprovalGC(ctx, s)
	if d := lockResult.RequeueAfter; d > 0 && (result.RequeueAfter == 0 || d < result.RequeueAfter) {
		result.RequeueAfter = d
	}
	return result, err
}

// newestFirst orders changes newest first: creation time, then attempt,
// then name (so the order is total and stable).
func newestFirst(a, b sluicev1.ChangeRequest) int {
	if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
		return c
	}
	if a.Spec.Attempt != b.Spec.Attempt {
		return int(b.Spec.Attempt - a.Spec.Attempt)
	}
	switch {
	case a.Name > b.Name:
		return -1
	case a.Name < b.Name:
		return 1
	}
	return 0
}

// patchStatus writes the operator's status fields when they changed.
func (r *ReleaseReconciler) patchStatus(ctx context.Context, s *releaseScope) error {
	if equality.Semantic.DeepEqual(s.original.Status, s.rel.Status) {
		return nil
	}
	patch := client.MergeFromWithOptions(s.original, client.MergeFromWithOptimisticLock{})
	if err := r.Client.Status().Patch(ctx, s.rel, patch, client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("patch status of Release %s: %w", s.rel.Name, err)
	}
	return nil
}

// reconcileLock hands the apply lock on: a holder that is terminal
// (recorded as the applied change when applied) or gone lets it go, and a
// free lock goes to the next holder in line (nextHolder), in the same
// write as the summary. It is the one writer that moves a lock from one
// change to the next, so the changes never race for it. A live holder
// keeps it; one that is not a change of this release (a manual edit) is
// looked at again after LockRetryInterval, as nothing else would wake
// this release when it ends.
func (r *ReleaseReconciler) reconcileLock(ctx context.Context, s *releaseScope) (ctrl.Result, error) {
	if holder := s.rel.Status.CurrentChange; holder != "" {
		i := slices.IndexFunc(s.changes, func(c sluicev1.ChangeRequest) bool { return c.Name == holder })
		switch {
		case i >= 0 && !s.changes[i].Status.Phase.IsTerminal():
			return ctrl.Result{}, nil
		case i >= 0:
			releaseLock(s.rel, &s.changes[i])
		default:
			// Not in the cache: make sure it is really gone.
			cr := &sluicev1.ChangeRequest{}
			err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: s.rel.Namespace, Name: holder}, cr)
			switch {
			case apierrors.IsNotFound(err):
				s.rel.Status.CurrentChange = ""
			case err != nil:
				return ctrl.Result{}, fmt.Errorf("get lock holder %s: %w", holder, err)
			case cr.Status.Phase.IsTerminal():
				releaseLock(s.rel, cr)
			case cr.Spec.Release == s.rel.Name:
				// Newer than the cache: its own events bring the
				// release back.
				return ctrl.Result{}, nil
			default:
				return ctrl.Result{RequeueAfter: lockRetry(r.LockRetryInterval)}, nil
			}
		}
	}
	if next := nextHolder(s.changes); next != nil {
		s.rel.Status.CurrentChange = next.Name
		log.FromContext(ctx).V(1).Info("Handed the apply lock on", "changeRequest", next.Name)
	}
	return ctrl.Result{}, nil
}

// finishedAt is when a terminal change reached its phase.
func finishedAt(cr *sluicev1.ChangeRequest) *metav1.Time {
	if cr.Status.Apply != nil && cr.Status.Apply.FinishedAt != nil {
		return cr.Status.Apply.FinishedAt
	}
	if c := meta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionReady); c != nil {
		t := c.LastTransitionTime
		return &t
	}
	return nil
}

// reconcileApplied records the newest applied change when the status does
// not name it yet (the ChangeRequest reconciler normally records it with
// the lock; this repairs a crash between the two writes).
func (r *ReleaseReconciler) reconcileApplied(s *releaseScope) {
	var newest *sluicev1.ChangeRequest
	for i := range s.changes {
		cr := &s.changes[i]
		if cr.Status.Phase != sluicev1.PhaseApplied {
			continue
		}
		if newest == nil || finishedAt(cr).After(finishedAt(newest).Time) {
			newest = cr
		}
	}
	if newest == nil || newest.Name == s.rel.Status.AppliedChange {
		return
	}
	if current := s.rel.Status.AppliedChange; current != "" {
		for i := range s.changes {
			if s.changes[i].Name == current && !finishedAt(newest).After(finishedAt(&s.changes[i]).Time) {
				return
			}
		}
		if !slices.ContainsFunc(s.changes, func(c sluicev1.ChangeRequest) bool { return c.Name == current }) {
			// The recorded change is gone; only a change newer than
			// its history entry replaces it.
			for _, h := range s.rel.Status.History {
				if h.ChangeRequest == current && h.FinishedAt != nil && !finishedAt(newest).After(h.FinishedAt.Time) {
					return
				}
			}
		}
	}
	recordApplied(s.rel, newest)
}

// reconcileHistory merges the terminal changes into the history, newest
// first, keeping MaxHistory entries (entries of deleted changes stay).
func (r *ReleaseReconciler) reconcileHistory(s *releaseScope) {
	byName := map[string]sluicev1.ReleaseHistoryEntry{}
	for _, h := range s.rel.Status.History {
		byName[h.ChangeRequest] = h
	}
	for i := range s.changes {
		cr := &s.changes[i]
		if !cr.Status.Phase.IsTerminal() || isPreview(cr) {
			continue
		}
		byName[cr.Name] = sluicev1.ReleaseHistoryEntry{
			ChangeRequest:  cr.Name,
			Revision:       cr.Spec.Revision,
			Phase:          cr.Status.Phase,
			ApprovalDigest: cr.Spec.ApprovalDigest,
			FinishedAt:     finishedAt(cr),
		}
	}
	history := make([]sluicev1.ReleaseHistoryEntry, 0, len(byName))
	for _, h := range byName {
		history = append(history, h)
	}
	slices.SortFunc(history, func(a, b sluicev1.ReleaseHistoryEntry) int {
		var ta, tb time.Time
		if a.FinishedAt != nil {
			ta = a.FinishedAt.Time
		}
		if b.FinishedAt != nil {
			tb = b.FinishedAt.Time
		}
		if c := tb.Compare(ta); c != 0 {
			return c
		}
		switch {
		case a.ChangeRequest > b.ChangeRequest:
			return -1
		case a.ChangeRequest < b.ChangeRequest:
			return 1
		}
		return 0
	})
	if len(history) > MaxHistory {
		history = history[:MaxHistory]
	}
	if len(history) == 0 {
		history = nil
	}
	s.rel.Status.History = history
}

// reconcileConditions sets Ready, Progressing and Degraded from the lock
// and the newest non-preview change.
func (r *ReleaseReconciler) reconcileConditions(s *releaseScope) {
	var newest *sluicev1.ChangeRequest
	for i := range s.all {
		if !isPreview(&s.all[i]) {
			newest = &s.all[i]
			break
		}
	}
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&s.rel.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: truncate(msg), ObservedGeneration: s.rel.Generation})
	}

	// Progressing: a change holds the lock or waits at the gate.
	switch {
	case s.rel.Status.CurrentChange != "":
		set(sluicev1.ConditionProgressing, metav1.ConditionTrue, sluicev1.ReasonApplying, fmt.Sprintf("%s holds the apply lock", s.rel.Status.CurrentChange))
	case newest != nil && !newest.Status.Phase.IsTerminal():
		set(sluicev1.ConditionProgressing, metav1.ConditionTrue, changeReason(newest), fmt.Sprintf("%s is %s", newest.Name, phaseOf(newest)))
	default:
		set(sluicev1.ConditionProgressing, metav1.ConditionFalse, sluicev1.ReasonSucceeded, "no change in flight")
	}

	// Degraded: the newest change that ended for its own sake failed.
	var lastEnded *sluicev1.ChangeRequest
	for i := range s.all {
		cr := &s.all[i]
		if isPreview(cr) || !cr.Status.Phase.IsTerminal() || cr.Status.Phase == sluicev1.PhaseSuperseded {
			continue
		}
		lastEnded = cr
		break
	}
	if lastEnded != nil && lastEnded.Status.Phase == sluicev1.PhaseFailed {
		set(sluicev1.ConditionDegraded, metav1.ConditionTrue, changeReason(lastEnded), fmt.Sprintf("%s failed", lastEnded.Name))
	} else {
		set(sluicev1.ConditionDegraded, metav1.ConditionFalse, sluicev1.ReasonSucceeded, "the last change did not fail")
	}

	// Ready: the newest change is applied.
	switch {
	case newest == nil:
		set(sluicev1.ConditionReady, metav1.ConditionFalse, sluicev1.ReasonProgressing, "no change yet")
	case newest.Status.Phase == sluicev1.PhaseApplied:
		set(sluicev1.ConditionReady, metav1.ConditionTrue, sluicev1.ReasonSucceeded, fmt.Sprintf("%s applied revision %s", newest.Name, newest.Spec.Revision))
	default:
		set(sluicev1.ConditionReady, metav1.ConditionFalse, changeReason(newest), fmt.Sprintf("the newest change %s is %s", newest.Name, phaseOf(newest)))
	}
}

func phaseOf(cr *sluicev1.ChangeRequest) sluicev1.ChangeRequestPhase {
	if cr.Status.Phase == "" {
		return sluicev1.PhasePending
	}
	return cr.Status.Phase
}

// changeReason is the reason of a change's Ready condition, or Progressing.
func changeReason(cr *sluicev1.ChangeRequest) string {
	if c := meta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionReady); c != nil {
		return c.Reason
	}
	return sluicev1.ReasonProgressing
}

func (r *ReleaseReconciler) keep() int {
	if r.KeepChangeRequests > 0 {
		return r.KeepChangeRequests
	}
	return 20
}

// reconcileRetention deletes terminal changes beyond the newest
// KeepChangeRequests, never the lock holder or the applied change.
func (r *ReleaseReconciler) reconcileRetention(ctx context.Context, s *releaseScope) error {
	if len(s.changes) <= r.keep() {
		return nil
	}
	kept := s.changes[:r.keep()]
	for i := r.keep(); i < len(s.changes); i++ {
		cr := &s.changes[i]
		if !cr.Status.Phase.IsTerminal() || cr.Name == s.rel.Status.CurrentChange || cr.Name == s.rel.Status.AppliedChange || !cr.DeletionTimestamp.IsZero() {
			kept = append(kept, *cr)
			continue
		}
		err := r.Client.Delete(ctx, cr, client.Preconditions{UID: &cr.UID, ResourceVersion: &cr.ResourceVersion})
		if err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete old ChangeRequest %s: %w", cr.Name, err)
		}
	}
	s.changes = kept
	return nil
}

func (r *ReleaseReconciler) grace() time.Duration {
	if r.ApprovalGracePeriod > 0 {
		return r.ApprovalGracePeriod
	}
	return 10 * time.Minute
}

// reconcileApprovalGC deletes the release's Approvals that no change
// needs any more: those on an approvalDigest that none of its remaining
// ChangeRequests carries (collectable), once they are older than the grace
// period; younger ones are looked at again when it ends. A standing reject
// (the newest decision of its approver on the content) is never collected:
// the content it vetoes can come back with any push, after its change was
// pruned or the release was removed and added again, and the veto must
// still hold then. The cache may not have seen a ChangeRequest created a
// moment ago, so the orphans are confirmed against the API server before
// anything is deleted.
func (r *ReleaseReconciler) reconcileApprovalGC(ctx context.Context, s *releaseScope) (ctrl.Result, error) {
	var list sluicev1.ApprovalList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.rel.Namespace), client.MatchingFields{IndexRelease: s.rel.Name}); err != nil {
		return ctrl.Result{}, fmt.Errorf("list Approvals of Release %s: %w", s.rel.Name, err)
	}
	digests := map[sluicev1.Digest]bool{}
	for i := range s.changes {
		digests[s.changes[i].Spec.ApprovalDigest] = true
	}
	var result ctrl.Result
	var orphans []*sluicev1.Approval
	now := r.now()
	for _, a := range collectable(list.Items, digests) {
		if age := now.Sub(a.CreationTimestamp.Time); age < r.grace() {
			if wait := r.grace() - age + time.Second; result.RequeueAfter == 0 || wait < result.RequeueAfter {
				result.RequeueAfter = wait
			}
			continue
		}
		orphans = append(orphans, a)
	}
	if len(orphans) == 0 {
		return result, nil
	}
	live, err := r.liveDigests(ctx, s.rel)
	if err != nil {
		return ctrl.Result{}, err
	}
	for _, a := range orphans {
		if live[a.Spec.ApprovalDigest] {
			continue // its change is newer than the cache; the change's events bring the release back
		}
		if controllerutil.ContainsFinalizer(a, sluicev1.ApprovalFinalizer) {
			orig := a.DeepCopy()
			controllerutil.RemoveFinalizer(a, sluicev1.ApprovalFinalizer)
			if err := r.Client.Patch(ctx, a, client.MergeFrom(orig), client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsNotFound(err) {
				return ctrl.Result{}, fmt.Errorf("remove finalizer of orphaned Approval %s: %w", a.Name, err)
			}
		}
		if err := r.Client.Delete(ctx, a, client.Preconditions{UID: &a.UID}); err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("delete orphaned Approval %s: %w", a.Name, err)
		}
	}
	return result, nil
}

// collectable returns the Approvals on a digest that no change in live
// carries, except each approver's standing reject (their newest decision on
// that digest, when it is a reject), oldest first. Deleting them in this
// order never changes what stands: an approver's newest decision goes
// last, so a pass that stops half-way cannot leave an older reject
// standing in place of a newer revoke.
func collectable(approvals []sluicev1.Approval, live map[sluicev1.Digest]bool) []*sluicev1.Approval {
	type key struct {
		digest   sluicev1.Digest
		approver sluicev1.Identity
	}
	newest := map[key]*sluicev1.Approval{}
	var out []*sluicev1.Approval
	for i := range approvals {
		a := &approvals[i]
		if live[a.Spec.ApprovalDigest] || !a.DeletionTimestamp.IsZero() {
			continue
		}
		out = append(out, a)
		k := key{a.Spec.ApprovalDigest, a.Spec.Approver.Canonical()}
		if n, ok := newest[k]; !ok || gate.Newer(a, n) {
			newest[k] = a
		}
	}
	out = slices.DeleteFunc(out, func(a *sluicev1.Approval) bool {
		return a.Spec.Decision == sluicev1.DecisionReject && newest[key{a.Spec.ApprovalDigest, a.Spec.Approver.Canonical()}] == a
	})
	slices.SortStableFunc(out, func(x, y *sluicev1.Approval) int {
		switch {
		case x == y:
			return 0
		case gate.Newer(y, x):
			return -1
		}
		return 1
	})
	return out
}

// liveDigests reads the approval digests of the release's ChangeRequests
// from the API server, past the cache. ChangeRequests are matched by
// spec.release, not by label, so one without the label still protects its
// Approvals.
func (r *ReleaseReconciler) liveDigests(ctx context.Context, rel *sluicev1.Release) (map[sluicev1.Digest]bool, error) {
	var list sluicev1.ChangeRequestList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(rel.Namespace)); err != nil {
		return nil, fmt.Errorf("list ChangeRequests of Release %s: %w", rel.Name, err)
	}
	live := map[sluicev1.Digest]bool{}
	for i := range list.Items {
		if list.Items[i].Spec.Release == rel.Name {
			live[list.Items[i].Spec.ApprovalDigest] = true
		}
	}
	return live, nil
}

// reconcileDelete runs the cleanup of the release's applier, then removes
// the finalizer. A failing cleanup keeps the finalizer and is retried.
func (r *ReleaseReconciler) reconcileDelete(ctx context.Context, rel *sluicev1.Release) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(rel, sluicev1.ReleaseFinalizer) {
		return ctrl.Result{}, nil
	}
	if done, err := r.reconcileDeletedByChange(ctx, rel); err != nil || done {
		return ctrl.Result{}, err
	}
	// An apply in flight finishes first: cleaning up under it would race.
	if holder := rel.Status.CurrentChange; holder != "" {
		cr := &sluicev1.ChangeRequest{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: holder}, cr)
		if err != nil && !apierrors.IsNotFound(err) {
			return ctrl.Result{}, fmt.Errorf("get lock holder %s: %w", holder, err)
		}
		if err == nil && cr.Status.Phase == sluicev1.PhaseApplying {
			log.FromContext(ctx).Info("Deletion waits for the change being applied", "changeRequest", holder)
			return ctrl.Result{RequeueAfter: 10 * time.Second}, nil
		}
	}
	err := r.cleanup(ctx, rel)
	if w, ok := applier.AsWaiting(err); ok {
		// Argo CD is still pruning: look again later, no error.
		log.FromContext(ctx).V(1).Info("Cleanup waits", "reason", w.Reason, "message", w.Message)
		return ctrl.Result{RequeueAfter: w.After()}, nil
	}
	return ctrl.Result{}, err
}

// cleanup removes what was applied for the release (see appliedWorkload:
// the applied change's delivery and namespace, never the Release's spec),
// then removes the finalizer. The Terraform state stays in place.
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
	orig := rel.DeepCopy()
	controllerutil.RemoveFinalizer(rel, sluicev1.ReleaseFinalizer)
	if err := r.Client.Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer of Release %s: %w", rel.Name, err))
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
