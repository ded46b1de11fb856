package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// The release's apply lock, and the hand-off of an approved change to its
// applier.
//
// The release's apply lock is Release.status.currentChange: the one change
// of a release that may be handed to an applier. It is taken and handed on
// with optimistic-concurrency patches of the Release's status.
//
// Who writes it:
//   - a change that passed the gate takes a free lock itself, but only when
//     no other change of the release is ahead of it in line
//     (mayTakeLock), so a single change needs no extra round trip;
//   - a change that holds the lock but no longer passes the gate hands it
//     back itself, once its own status is written (only the holder may let
//     a live lock go);
//   - everything else is the Release reconciler's (reconcileLock, below):
//     it takes the lock from a holder that is terminal (recording an
//     applied one) or gone, and gives a free lock to the first change in
//     line, in the same write as its summary. The
//     changes waiting in line never race for it and never poll: the lock
//     moving wakes its new holder (lockHolder).
//
// Safety does not depend on who writes it: a live holder is never replaced
// (terminal phases are final, so a cached terminal phase is never stale),
// every write carries the resourceVersion it read, and the change re-checks
// the gate on data read from the API server before Applying is written.

// mayTakeLock reports whether s.cr, which passed the gate, should ask the
// API server for the apply lock itself: the cached Release shows it free
// or held by s.cr, and no other change of the release is ahead of it in
// line (see inLineBefore) that waits for the lock or is not decided yet (a
// burst of changes created together would otherwise all race for it).
// It is only a hint that saves writes; the API server decides.
func (r *ChangeRequestReconciler) mayTakeLock(ctx context.Context, s *changeScope) bool {
	switch s.release.Status.CurrentChange {
	case s.cr.Name:
		return true
	case "":
	default:
		return false
	}
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexRelease: s.cr.Spec.Release}, client.UnsafeDisableDeepCopy); err != nil {
		return false // wait: the Release reconciler hands the lock on
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name != s.cr.Name && (waitsForLock(o) || undecided(o)) && inLineBefore(o, s.cr) {
			return false
		}
	}
	return true
}

// undecided reports whether a cached change has not been through the gate
// yet (no phase), and may still be approved.
func undecided(cr *sluicev1.ChangeRequest) bool {
	return cr.Status.Phase == "" && cr.DeletionTimestamp.IsZero() && !isPreview(cr)
}

func (r *ChangeRequestReconciler) lockRetry() time.Duration {
	return lockRetry(r.LockRetryInterval)
}

func lockRetry(d time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return 30 * time.Second
}

// handBackLock clears Release.status.currentChange when cr holds it, read
// from the API server, with an optimistic-concurrency patch. Only the
// holder calls it, for a lock it holds while live.
func (r *ChangeRequestReconciler) handBackLock(ctx context.Context, cr *sluicev1.ChangeRequest) error {
	rel := &sluicev1.Release{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: cr.Spec.Release}, rel); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("get Release %s to hand back its apply lock: %w", cr.Spec.Release, err))
	}
	if rel.Status.CurrentChange != cr.Name {
		return nil
	}
	orig := rel.DeepCopy()
	rel.Status.CurrentChange = ""
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
	if cr.Status.Phase.WasApplied() {
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
// Release from the API server. With takeOver, a lock held by a change that
// is gone or terminal is taken over (recording that change first);
// without, only a free lock is taken. It returns the fresh Release,
// whether cr holds the lock, and otherwise who does.
func (r *ChangeRequestReconciler) acquireLock(ctx context.Context, cr *sluicev1.ChangeRequest, takeOver bool) (*sluicev1.Release, bool, string, error) {
	rel := &sluicev1.Release{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: cr.Spec.Release}, rel); err != nil {
		return nil, false, "", fmt.Errorf("get Release %s for the apply lock: %w", cr.Spec.Release, err)
	}
	holder := rel.Status.CurrentChange
	if holder == cr.Name {
		return rel, true, "", nil
	}
	if sluicev1.ShardOf(rel) != r.Shard {
		// The Release moved to another shard (the syncer moves it only
		// while its lock is free): this shard takes no lock of it, and
		// the move's optimistic write makes a take that read it before
		// the move fail.
		return rel, false, holder, nil
	}
	orig := rel.DeepCopy()
	if holder != "" && !takeOver {
		return rel, false, holder, nil
	}
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
	r.summarizeTakenLock(ctx, rel, cr)
	if err := r.Client.Status().Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
		return nil, false, "", fmt.Errorf("take the apply lock of Release %s: %w", rel.Name, err)
	}
	log.FromContext(ctx).V(1).Info("Took the apply lock", "release", rel.Name)
	return rel, true, "", nil
}

// summarizeTakenLock sets, on rel whose lock cr is taking, the
// Progressing and Ready conditions the Release reconciler would write
// next (summarizeProgressing, summarizeReady: the lock and the newest
// change decide them), so the lock write carries the summary of the hold
// and the Release's own pass after it writes nothing. The newest change
// comes from the cache, cr as this reconciler has it; should the cache be
// behind, the Release's next pass corrects the summary.
func (r *ChangeRequestReconciler) summarizeTakenLock(ctx context.Context, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) {
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(rel.Namespace), client.MatchingFields{IndexRelease: rel.Name}, client.UnsafeDisableDeepCopy); err != nil {
		return // the Release reconciler summarises the hold
	}
	// Shallow copies, only read: sorting them leaves the cache's objects
	// as they are.
	changes := make([]sluicev1.ChangeRequest, 0, len(list.Items)+1)
	changes = append(changes, *cr)
	for i := range list.Items {
		if list.Items[i].Name != cr.Name {
			changes = append(changes, list.Items[i])
		}
	}
	slices.SortFunc(changes, newestFirst)
	newest := newestNonPreview(changes)
	sum := reconcile.Summary{Conditions: &rel.Status.Conditions, Generation: rel.Generation, MaxMessage: maxMessage}
	summarizeProgressing(sum, rel, newest)
	summarizeReady(sum, rel, newest)
}

// takeFreeLock is acquireLock without takeover for a change the cache
// shows first in line for a free lock (mayTakeLock): it writes the lock on
// the cached Release, with an optimistic-concurrency patch that only
// succeeds when that copy is current, so the usual case needs no read
// first; the write returns the Release as the API server now has it. Only
// when the cache was behind does it read the Release and try again.
func (r *ChangeRequestReconciler) takeFreeLock(ctx context.Context, s *changeScope) (*sluicev1.Release, bool, string, error) {
	cached := s.release
	if cached == nil || cached.Status.CurrentChange != "" || sluicev1.ShardOf(cached) != r.Shard {
		return r.acquireLock(ctx, s.cr, false)
	}
	rel := cached.DeepCopy()
	orig := cached.DeepCopy()
	rel.Status.CurrentChange = s.cr.Name
	r.summarizeTakenLock(ctx, rel, s.cr)
	err := r.Client.Status().Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner))
	switch {
	case err == nil:
		log.FromContext(ctx).V(1).Info("Took the apply lock", "release", rel.Name)
		return rel, true, "", nil
	case apierrors.IsConflict(err):
		// The cache was behind: decide on the Release as it is.
		return r.acquireLock(ctx, s.cr, false)
	default:
		return nil, false, "", fmt.Errorf("take the apply lock of Release %s: %w", rel.Name, err)
	}
}

// waitsForLock reports whether a cached change is approved and waiting for
// its release's apply lock: Approved, not being deleted, not a preview,
// and not stalled (a stalled change would hold up the line).
func waitsForLock(cr *sluicev1.ChangeRequest) bool {
	return cr.Status.Phase == sluicev1.PhaseApproved && cr.DeletionTimestamp.IsZero() && !isPreview(cr) &&
		!meta.IsStatusConditionTrue(cr.Status.Conditions, sluicev1.ConditionStalled)
}

// inLineBefore orders the changes waiting for a release's lock: oldest
// first (creation, then attempt), then by name, so every replica and pass
// agrees on who is next.
func inLineBefore(a, b *sluicev1.ChangeRequest) bool {
	if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
		return c < 0
	}
	if a.Spec.Attempt != b.Spec.Attempt {
		return a.Spec.Attempt < b.Spec.Attempt
	}
	return a.Name < b.Name
}

// nextHolder is the change a free apply lock goes to, per the cache: a
// change in Applying first (it was approved and re-checked and may be half
// applied; only a manual edit of the lock leaves one without it), then the
// first change waiting in line; nil when none waits.
func nextHolder(changes []sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	var first *sluicev1.ChangeRequest
	for i := range changes {
		c := &changes[i]
		if c.Status.Phase == sluicev1.PhaseApplying && c.DeletionTimestamp.IsZero() {
			return c
		}
		if waitsForLock(c) && (first == nil || inLineBefore(c, first)) {
			first = c
		}
	}
	return first
}

// reconcileHandOff takes the release's apply lock (or waits for it),
// re-checks the gate on fresh data and moves the change to Applying. The
// applier is called only once Applying is stored (see pass).
func (r *ChangeRequestReconciler) reconcileHandOff(ctx context.Context, s *changeScope) reconcile.Result {
	if _, ok := r.Appliers.For(delivery(s.cr)); !ok {
		return s.noApplier()
	}
	// Only a change first in line with the lock free asks the API server
	// for it; the others wait without polling: the Release reconciler
	// hands the lock on, and the lock moving wakes its new holder.
	if !r.mayTakeLock(ctx, s) {
		return s.waitForLock()
	}
	rel, held, _, err := r.takeFreeLock(ctx, s)
	if apierrors.IsConflict(err) || err == nil && !held {
		// Another change or writer was first: wait in line.
		return s.waitForLock()
	}
	if err != nil {
		return reconcile.Failure(err)
	}
	if r.BeforeHandOff != nil {
		r.BeforeHandOff(ctx, s.cr.DeepCopy())
	}

	// The re-check: nothing from the cache.
	fresh := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s.cr), fresh); err != nil {
		return reconcile.Failure(fmt.Errorf("re-read ChangeRequest at hand-off: %w", err))
	}
	if fresh.ResourceVersion != s.patch.Original().ResourceVersion {
		// The cache is behind: decide again, at once, on what is
		// current (nothing of this pass is written).
		return reconcile.Restart(fresh)
	}
	in, err := gateinput.Load(ctx, r.APIReader, fresh, rel)
	if err != nil {
		return reconcile.Failure(fmt.Errorf("re-read the gate's inputs at hand-off: %w", err))
	}
	var all sluicev1.ApprovalList
	// Only this shard's Approvals: the Release and its change are this
	// shard's, and the syncer moves a Release's Approvals with it. Only
	// those of this digest (a selectable field of the Approval CRD, so
	// the API server selects them, not every Approval of the namespace).
	if err := r.APIReader.List(ctx, &all, client.InNamespace(s.cr.Namespace), client.MatchingLabelsSelector{Selector: sluicev1.ShardSelector(r.Shard)},
		client.MatchingFields{IndexApprovalDigest: string(fresh.Spec.ApprovalDigest)}); err != nil {
		return reconcile.Failure(fmt.Errorf("re-read Approvals at hand-off: %w", err))
	}
	var approvals []sluicev1.Approval
	for _, a := range all.Items {
		if a.Spec.ApprovalDigest == fresh.Spec.ApprovalDigest {
			approvals = append(approvals, a)
		}
	}
	s.release, s.locked = rel, rel
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
		return reconcile.Done()
	}
	app, _ := r.Appliers.For(delivery(s.cr))
	now := metav1.NewTime(r.now())
	s.cr.Status.Apply = &sluicev1.ApplyResult{Applier: app.Name(), StartedAt: &now}
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonApplying, "handed to the "+app.Name()+" applier")
	s.setPhase(sluicev1.PhaseApplying, sluicev1.ReasonApplying, "handed to the "+app.Name()+" applier")
	return reconcile.Done()
}

// waitForLock ends the pass of an approved change waiting for its
// release's apply lock. Nothing is requeued: the lock moving to it wakes it.
func (s *changeScope) waitForLock() reconcile.Result {
	// The message names no holder, so waiting changes are not rewritten
	// each time the lock passes on.
	msg := "waiting for the release's apply lock (Release.status.currentChange)"
	s.setCondition(sluicev1.ConditionApplied, metav1.ConditionFalse, sluicev1.ReasonWaitingForLock, msg)
	s.ready(sluicev1.ReasonWaitingForLock, msg)
	return reconcile.Done()
}

// handBackIfHeld marks the lock for hand-back when the change holds it
// (per rel) and leaves a non-terminal phase; a terminal holder's lock is
// taken by the Release reconciler.
func (s *changeScope) handBackIfHeld(rel *sluicev1.Release) {
	s.handBack = rel != nil && rel.Status.CurrentChange == s.cr.Name && !s.cr.Status.Phase.IsTerminal()
}

// reconcileLock hands the apply lock on: a holder that is terminal
// (recorded as the applied change when applied) or gone lets it go, and a
// free lock goes to the next holder in line (nextHolder), in the same
// write as the summary. It is the one writer that moves a lock from one
// change to the next, so the changes never race for it. A live holder
// keeps it; one that is not a change of this release (a manual edit) is
// looked at again after LockRetryInterval, as nothing else would wake
// this release when it ends.
func (r *ReleaseReconciler) reconcileLock(ctx context.Context, s *releaseScope) reconcile.Result {
	if holder := s.rel.Status.CurrentChange; holder != "" {
		i := slices.IndexFunc(s.changes, func(c sluicev1.ChangeRequest) bool { return c.Name == holder })
		switch {
		case i >= 0 && !s.changes[i].Status.Phase.IsTerminal():
			return reconcile.Next()
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
				return reconcile.Failure(fmt.Errorf("get lock holder %s: %w", holder, err))
			case cr.Status.Phase.IsTerminal():
				releaseLock(s.rel, cr)
			case cr.Spec.Release == s.rel.Name:
				// Newer than the cache: its own events bring the
				// release back.
				return reconcile.Next()
			default:
				s.requeue(lockRetry(r.LockRetryInterval))
				return reconcile.Next()
			}
		}
	}
	if next := nextHolder(s.changes); next != nil {
		s.rel.Status.CurrentChange = next.Name
		log.FromContext(ctx).V(1).Info("Handed the apply lock on", "changeRequest", next.Name)
	}
	return reconcile.Next()
}
