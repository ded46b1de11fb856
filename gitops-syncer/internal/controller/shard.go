package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// ShardMoveRetry is how often a Repository whose Releases wait to move to
// its new shard is looked at again.
const ShardMoveRetry = 2 * time.Second

// reconcileShard moves the Repository's objects to its shard (label
// sluicev1.LabelShard) after the Repository was relabelled: each Release,
// then its ChangeRequests, their review ConfigMaps and its Approvals. The
// objects of the old shard are read past the cache (which holds this
// shard's only), once per Repository and key while nothing waits.
//
// A Release moves only while its apply lock is free (no change holds it,
// or the holder ended), with an optimistic-concurrency write: the old
// shard's operator takes a lock only on a Release of its own shard, read
// from the API server, so a change is never applied by both shards, and
// a change in Applying finishes on the shard that started it before its
// Release moves. While a Release waits, the Repository is not synced
// (Ready=False, reason ShardMoving) and is looked at again after
// ShardMoveRetry.
func (r *RepositoryReconciler) reconcileShard(ctx context.Context, s *repoScope) reconcile.Result {
	repo := s.repo
	key := sluicev1.ShardOf(repo)
	memo := types.NamespacedName{Namespace: repo.Namespace, Name: repo.Name}
	r.memoMu.Lock()
	settled, ok := r.shardSettled[memo]
	r.memoMu.Unlock()
	if ok && settled == key {
		return reconcile.Next()
	}
	waiting, err := r.moveToShard(ctx, repo, key)
	if err != nil {
		return reconcile.Failure(err)
	}
	if len(waiting) > 0 {
		msg := fmt.Sprintf("moving to shard %q: %d Release(s) wait for their apply lock to be free: %s", key, len(waiting), strings.Join(waiting, ", "))
		s.conclude(retrying(sluicev1.ReasonShardMoving, msg))
		return reconcile.Requeue(ShardMoveRetry)
	}
	r.memoMu.Lock()
	if r.shardSettled == nil {
		r.shardSettled = map[types.NamespacedName]string{}
	}
	r.shardSettled[memo] = key
	r.memoMu.Unlock()
	return reconcile.Next()
}

// moveToShard relabels what of repo is not in shard key yet and returns
// the Releases that must wait (their lock is held by a live change).
func (r *RepositoryReconciler) moveToShard(ctx context.Context, repo *sluicev1.Repository, key string) ([]string, error) {
	var rels sluicev1.ReleaseList
	if err := r.APIReader.List(ctx, &rels, client.InNamespace(repo.Namespace), client.MatchingLabels{sluicev1.LabelRepository: repo.Name}); err != nil {
		return nil, fmt.Errorf("list the Releases of Repository %s: %w", repo.Name, err)
	}
	var waiting []string
	moved := map[string]bool{}
	for i := range rels.Items {
		rel := &rels.Items[i]
		if rel.Spec.Repository != repo.Name {
			continue // labelled as ours, owned by another: left alone
		}
		if sluicev1.ShardOf(rel) != key {
			ok, err := r.moveRelease(ctx, rel, key)
			if err != nil {
				return nil, err
			}
			if !ok {
				waiting = append(waiting, rel.Name)
				continue
			}
		}
		moved[rel.Name] = true
	}
	if len(moved) == 0 {
		return waiting, nil
	}
	var changes sluicev1.ChangeRequestList
	if err := r.APIReader.List(ctx, &changes, client.InNamespace(repo.Namespace), client.MatchingLabels{sluicev1.LabelRepository: repo.Name}); err != nil {
		return nil, fmt.Errorf("list the ChangeRequests of Repository %s: %w", repo.Name, err)
	}
	var errs []error
	for i := range changes.Items {
		cr := &changes.Items[i]
		if !moved[cr.Spec.Release] {
			continue
		}
		errs = append(errs, relabel(ctx, r.Client, cr, key), r.moveReview(ctx, cr, key))
	}
	// Approvals are matched by spec.release: one written by hand may lack
	// the labels.
	var approvals sluicev1.ApprovalList
	if err := r.APIReader.List(ctx, &approvals, client.InNamespace(repo.Namespace)); err != nil {
		return nil, fmt.Errorf("list the Approvals of Repository %s: %w", repo.Name, err)
	}
	for i := range approvals.Items {
		if a := &approvals.Items[i]; moved[a.Spec.Release] {
			errs = append(errs, relabel(ctx, r.Client, a, key))
		}
	}
	sort.Strings(waiting)
	return waiting, errors.Join(errs...)
}

// moveRelease relabels rel into shard key when its apply lock is free,
// with rel's resourceVersion as precondition (a lock taken meanwhile makes
// it fail, and it is tried again). It reports whether rel moved.
func (r *RepositoryReconciler) moveRelease(ctx context.Context, rel *sluicev1.Release, key string) (bool, error) {
	if holder := rel.Status.CurrentChange; holder != "" {
		cr := &sluicev1.ChangeRequest{}
		err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: holder}, cr)
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return false, fmt.Errorf("read the apply lock holder %s of Release %s: %w", holder, rel.Name, err)
		case !cr.Status.Phase.IsTerminal():
			// Applying or about to: the old shard finishes it first.
			return false, nil
		}
		// An ended holder: the new shard's operator records it and
		// hands the lock on.
	}
	orig := rel.DeepCopy()
	sluicev1.SetShard(rel, key)
	if err := r.Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(ControllerName)); err != nil {
		if apierrors.IsConflict(err) {
			return false, nil
		}
		return false, fmt.Errorf("move Release %s to shard %q: %w", rel.Name, key, err)
	}
	log.FromContext(ctx).Info("Moved a Release to the Repository's shard", "release", rel.Name, "shard", key)
	return true, nil
}

// moveReview relabels the review ConfigMap of cr, if there is one.
func (r *RepositoryReconciler) moveReview(ctx context.Context, cr *sluicev1.ChangeRequest, key string) error {
	cm := &corev1.ConfigMap{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: review.ConfigMapName(cr.Name)}, cm)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read the review of %s: %w", cr.Name, err)
	}
	if cm.Labels[review.LabelReview] == "" {
		return nil // not a review: someone else's ConfigMap
	}
	return relabel(ctx, r.Client, cm, key)
}

// relabel sets obj's shard key with a merge patch, when it differs.
func relabel(ctx context.Context, c client.Client, obj client.Object, key string) error {
	orig := obj.DeepCopyObject().(client.Object)
	if !sluicev1.SetShard(obj, key) {
		return nil
	}
	if err := c.Patch(ctx, obj, client.MergeFrom(orig), client.FieldOwner(ControllerName)); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("move %T %s to shard %q: %w", obj, obj.GetName(), key, err)
	}
	return nil
}
