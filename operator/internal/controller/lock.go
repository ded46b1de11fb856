package controller

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The release's apply lock is Release.status.currentChange: the one change
// of a release that may be handed to an applier. It is taken and handed
// back with optimistic-concurrency patches of the Release's status, read
// from the API server, never from the cache.

// conflictRetry is how soon a pass that lost an optimistic-concurrency race
// for the apply lock runs again.
const conflictRetry = 100 * time.Millisecond

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

// handBackLockResult hands the lock back and turns a lost race into a
// quick retry instead of an error with growing backoff.
func (r *ChangeRequestReconciler) handBackLockResult(ctx context.Context, cr *sluicev1.ChangeRequest, rel *sluicev1.Release) stepResult {
	err := r.handBackLock(ctx, cr, rel)
	if apierrors.IsConflict(err) {
		return requeueAfter(conflictRetry)
	}
	return orDone(err)
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

// waitInLine reports whether another approved change of the release is
// ahead of s.cr in the line for the apply lock (see inLineBefore), per the
// cache. Only the first in line asks the API server for the lock, so the
// changes of a release do not race for it: the others wait, and are woken
// when the one ahead leaves Approved (see nextInLine).
func (r *ChangeRequestReconciler) waitInLine(ctx context.Context, s *changeScope) bool {
	if s.release.Status.CurrentChange == s.cr.Name {
		return false
	}
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexRelease: s.cr.Spec.Release}, client.UnsafeDisableDeepCopy); err != nil {
		return false // only a hint: the API server decides
	}
	for i := range list.Items {
		o := &list.Items[i]
		if o.Name != s.cr.Name && waitsForLock(o) && inLineBefore(o, s.cr) {
			return true
		}
	}
	return false
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

// successorWaits reports whether the cache shows another change of cr's
// release waiting for the lock: it takes the lock over from the terminal
// cr (recording cr) in one write, so cr does not hand it back first.
func (r *ChangeRequestReconciler) successorWaits(ctx context.Context, cr *sluicev1.ChangeRequest) bool {
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(cr.Namespace), client.MatchingFields{IndexRelease: cr.Spec.Release}, client.UnsafeDisableDeepCopy); err != nil {
		return false
	}
	for i := range list.Items {
		if o := &list.Items[i]; o.Name != cr.Name && waitsForLock(o) {
			return true
		}
	}
	return false
}
