package controller

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// recordChange records a ChangeRequest on its Release: the spec from the
// change (adoptSpec), then the syncer's status.
func (r *RepositoryReconciler) recordChange(ctx context.Context, plan *changePlan, cr *sluicev1.ChangeRequest) error {
	if plan.rollback != nil {
		return r.recordRollback(ctx, plan.release, cr)
	}
	if err := r.adoptSpec(ctx, plan, cr); err != nil {
		return err
	}
	return r.recordSynced(ctx, plan, cr)
}

// recordSynced writes the syncer's fields of the Release status (the
// operator owns the rest) and its Synced condition in one write, then marks
// a re-plan request handled.
func (r *RepositoryReconciler) recordSynced(ctx context.Context, plan *changePlan, cr *sluicev1.ChangeRequest) error {
	rel := plan.release
	fields := func(st *sluicev1.ReleaseStatus) bool {
		if st.LastSyncedTree == plan.tree && st.LastSyncedCommit == plan.revision && st.LatestChange == cr.Name {
			return false
		}
		st.LastSyncedTree, st.LastSyncedCommit, st.LatestChange = plan.tree, plan.revision, cr.Name
		return true
	}
	if err := r.setReleaseStatus(ctx, rel, fields, sluicev1.ConditionSynced, metav1.ConditionTrue, sluicev1.ReasonSucceeded,
		fmt.Sprintf("%s holds the inputs at %s", cr.Name, sluicev1.ShortSHA(plan.revision))); err != nil {
		return fmt.Errorf("record sync of release %s: %w", rel.Name, err)
	}
	if plan.replan != "" && rel.Annotations[annotationReplanHandled] != plan.replan {
		if err := r.Patch(ctx, rel, annotationPatch(annotationReplanHandled, plan.replan), client.FieldOwner(ControllerName)); err != nil {
			return fmt.Errorf("mark re-plan of release %s handled: %w", rel.Name, err)
		}
	}
	return nil
}

// recordUnchanged records on the Release that its inputs at plan's
// revision render what is applied: the synced tree and commit move on,
// Synced says "unchanged" with the applied change it was compared with,
// and an Event says the same. latestChange stays the applied change.
func (r *RepositoryReconciler) recordUnchanged(ctx context.Context, plan *changePlan, applied *sluicev1.ChangeRequest) error {
	rel := plan.release
	if rel.Status.LastSyncedTree != plan.tree || rel.Status.LastSyncedCommit != plan.revision {
		patch := statusPatch(map[string]*string{"lastSyncedTree": &plan.tree, "lastSyncedCommit": &plan.revision})
		if err := r.Status().Patch(ctx, rel, patch, client.FieldOwner(ControllerName)); err != nil {
			return fmt.Errorf("record sync of release %s: %w", rel.Name, err)
		}
	}
	msg := fmt.Sprintf("unchanged: rendered manifest and plan at %s equal the applied revision %s (%s); no ChangeRequest, nothing to approve",
		sluicev1.ShortSHA(plan.revision), sluicev1.ShortSHA(applied.Spec.Revision), applied.Name)
	c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionSynced)
	if c == nil || c.Reason != sluicev1.ReasonUnchanged || c.Message != msg {
		r.event(rel, corev1.EventTypeNormal, sluicev1.ReasonUnchanged, msg)
		log.FromContext(ctx).Info("Release unchanged at the new revision", "release", rel.Name, "revision", sluicev1.ShortSHA(plan.revision), "applied", applied.Name)
	}
	return r.setSynced(ctx, rel, metav1.ConditionTrue, sluicev1.ReasonUnchanged, msg)
}

// adoptSpec writes the Release's spec from a recorded change: its source,
// target namespace, delivery and rule. The Release's spec is a summary of
// the newest recorded change, written only after the ChangeRequest exists,
// so a push that cannot be planned changes nothing; no applier acts on it
// (they read the approved ChangeRequest). A change without a source (a
// manifest that does not parse) leaves the spec as it is.
func (r *RepositoryReconciler) adoptSpec(ctx context.Context, plan *changePlan, cr *sluicev1.ChangeRequest) error {
	src := cr.Spec.Source
	if src == nil || plan.spec == nil {
		return nil
	}
	rel := plan.release
	want := *plan.spec.DeepCopy()
	want.Service, want.Environment, want.SourcePath = src.Service, src.Environment, src.Path
	want.Chart, want.Values, want.Terraform = src.Chart, src.Values, src.Terraform.DeepCopy()
	want.TargetNamespace, want.Delivery, want.Rule = cr.Spec.TargetNamespace, cr.Spec.Delivery, *cr.Spec.Rule.DeepCopy()
	if equality.Semantic.DeepEqual(rel.Spec, want) {
		return nil
	}
	patched := rel.DeepCopy()
	patched.Spec = want
	if err := r.Patch(ctx, patched, client.MergeFrom(rel), client.FieldOwner(ControllerName)); err != nil {
		return fmt.Errorf("update release %s from %s: %w", rel.Name, cr.Name, err)
	}
	rel.Spec, rel.ResourceVersion = patched.Spec, patched.ResourceVersion
	return nil
}

// sameSource reports whether two recorded sources are the same; a change
// recorded without one (an older syncer) is never the same.
func sameSource(a, b *sluicev1.ChangeSource) bool {
	return a != nil && b != nil && equality.Semantic.DeepEqual(a, b)
}

// setSynced sets the Release's Synced condition. The operator writes the
// other conditions of the same list, so the write carries the
// resourceVersion of rel (a conflict reads again); nothing is written when
// rel already says the same.
func (r *RepositoryReconciler) setSynced(ctx context.Context, rel *sluicev1.Release, status metav1.ConditionStatus, reason, msg string) error {
	return r.setReleaseCondition(ctx, rel, sluicev1.ConditionSynced, status, reason, msg)
}

// setReleaseCondition sets one of the syncer's conditions (Synced,
// Orphaned) on a Release. The operator writes the other conditions of the
// same list, so the write carries the resourceVersion of rel (a conflict
// reads again); nothing is written when rel already says the same.
func (r *RepositoryReconciler) setReleaseCondition(ctx context.Context, rel *sluicev1.Release, typ string, status metav1.ConditionStatus, reason, msg string) error {
	return r.setReleaseStatus(ctx, rel, nil, typ, status, reason, msg)
}

// setReleaseStatus is setReleaseCondition that also sets the syncer's
// status fields with fields (when not nil; it reports whether it changed
// any), in the same write. On success rel holds what was written.
func (r *RepositoryReconciler) setReleaseStatus(ctx context.Context, rel *sluicev1.Release, fields func(*sluicev1.ReleaseStatus) bool, typ string, status metav1.ConditionStatus, reason, msg string) error {
	want := metav1.Condition{Type: typ, Status: status, Reason: reason, Message: text.Truncate(msg, 1024), ObservedGeneration: rel.Generation}
	if c := meta.FindStatusCondition(rel.Status.Conditions, typ); c != nil &&
		c.Status == want.Status && c.Reason == want.Reason && c.Message == want.Message && c.ObservedGeneration == want.ObservedGeneration &&
		(fields == nil || !fields(rel.Status.DeepCopy())) {
		return nil
	}
	fresh := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur := rel.DeepCopy()
		if fresh {
			cur = &sluicev1.Release{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(rel), cur); err != nil {
				return err
			}
			if cur.UID != rel.UID {
				return nil
			}
		}
		fresh = true
		orig := cur.DeepCopy()
		changed := meta.SetStatusCondition(&cur.Status.Conditions, want)
		if fields != nil && fields(&cur.Status) {
			changed = true
		}
		if !changed {
			return nil
		}
		if err := r.Status().Patch(ctx, cur, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(ControllerName)); err != nil {
			return err
		}
		if fields != nil {
			cur.DeepCopyInto(rel)
		}
		return nil
	})
	if client.IgnoreNotFound(err) != nil {
		// A Release deleted mid-pass has no condition to set.
		return fmt.Errorf("set %s of release %s: %w", typ, rel.Name, err)
	}
	return nil
}

// statusPatch is a JSON merge patch of the named status fields (a nil value
// removes the field), marshalled by encoding/json: %q would write Go escapes
// such as \x01 or \v that are not JSON.
func statusPatch(fields map[string]*string) client.Patch {
	return mergePatch(map[string]any{"status": fields})
}

// annotationPatch is a JSON merge patch that sets one annotation; the value
// comes from a user's annotation and may hold any character.
func annotationPatch(key, value string) client.Patch {
	return mergePatch(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
}

// mergePatch is the JSON merge patch of v.
func mergePatch(v map[string]any) client.Patch {
	// Maps of strings and string pointers always marshal.
	b, _ := json.Marshal(v)
	return client.RawPatch(types.MergePatchType, b)
}
