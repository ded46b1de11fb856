package controller

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// Garbage collection of the Release reconciler: the oldest terminal
// ChangeRequests beyond KeepChangeRequests, and the Approvals no remaining
// change needs.

func (r *ReleaseReconciler) keep() int {
	if r.KeepChangeRequests > 0 {
		return r.KeepChangeRequests
	}
	return 20
}

// reconcileRetention deletes terminal changes beyond the newest
// KeepChangeRequests, never the lock holder or the applied change.
func (r *ReleaseReconciler) reconcileRetention(ctx context.Context, s *releaseScope) reconcile.Result {
	if len(s.changes) <= r.keep() {
		return reconcile.Next()
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
			return reconcile.Failure(fmt.Errorf("delete old ChangeRequest %s: %w", cr.Name, err))
		}
	}
	s.changes = kept
	return reconcile.Next()
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
func (r *ReleaseReconciler) reconcileApprovalGC(ctx context.Context, s *releaseScope) reconcile.Result {
	var list sluicev1.ApprovalList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.rel.Namespace), client.MatchingFields{IndexRelease: s.rel.Name}); err != nil {
		return reconcile.Failure(fmt.Errorf("list Approvals of Release %s: %w", s.rel.Name, err))
	}
	digests := map[sluicev1.Digest]bool{}
	for i := range s.changes {
		digests[s.changes[i].Spec.ApprovalDigest] = true
	}
	var orphans []*sluicev1.Approval
	now := r.now()
	for _, a := range collectable(list.Items, digests) {
		if age := now.Sub(a.CreationTimestamp.Time); age < r.grace() {
			s.requeue(r.grace() - age + time.Second)
			continue
		}
		orphans = append(orphans, a)
	}
	if len(orphans) == 0 {
		return reconcile.Next()
	}
	live, err := r.liveDigests(ctx, s.rel)
	if err != nil {
		return reconcile.Failure(err)
	}
	for _, a := range orphans {
		if live[a.Spec.ApprovalDigest] {
			continue // its change is newer than the cache; the change's events bring the release back
		}
		if controllerutil.ContainsFinalizer(a, sluicev1.ApprovalFinalizer) {
			orig := a.DeepCopy()
			controllerutil.RemoveFinalizer(a, sluicev1.ApprovalFinalizer)
			if err := r.Client.Patch(ctx, a, client.MergeFrom(orig), client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Failure(fmt.Errorf("remove finalizer of orphaned Approval %s: %w", a.Name, err))
			}
		}
		if err := r.Client.Delete(ctx, a, client.Preconditions{UID: &a.UID}); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Failure(fmt.Errorf("delete orphaned Approval %s: %w", a.Name, err))
		}
	}
	return reconcile.Next()
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
// spec.release, not by the release label, so one without it still
// protects its Approvals; only this shard's are listed (the syncer moves a
// Release's changes and Approvals together, and an orphan is kept for the
// grace period anyway).
func (r *ReleaseReconciler) liveDigests(ctx context.Context, rel *sluicev1.Release) (map[sluicev1.Digest]bool, error) {
	var list sluicev1.ChangeRequestList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(rel.Namespace), client.MatchingLabelsSelector{Selector: sluicev1.ShardSelector(r.Shard)}); err != nil {
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
