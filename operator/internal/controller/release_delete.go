package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// reconcileDeletedByChange lets a Release go that an approved Delete change
// removed (status.deletedBy, confirmed against the change): its workload
// and infrastructure are gone and its state deleted, so the finalizer's
// cleanup is not run a second time. It reports whether it handled rel.
// Any other deletion (a break-glass delete) takes the normal cleanup.
func (r *ReleaseReconciler) reconcileDeletedByChange(ctx context.Context, rel *sluicev1.Release) (bool, error) {
	cr, ok, err := deletedByChange(ctx, r.APIReader, rel)
	if err != nil || !ok {
		return false, err
	}
	if r.Recorder != nil {
		what := "its steps are recorded in its status"
		if cr.Status.Apply != nil && cr.Status.Apply.Message != "" {
			what = cr.Status.Apply.Message
		}
		r.Recorder.Eventf(rel, nil, "Normal", sluicev1.ReasonDeleted, "Cleanup",
			"removed by the approved Delete change %s: %s", cr.Name, truncate(what))
	}
	orig := rel.DeepCopy()
	controllerutil.RemoveFinalizer(rel, sluicev1.ReleaseFinalizer)
	if err := r.Client.Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
		return true, client.IgnoreNotFound(fmt.Errorf("remove finalizer of Release %s: %w", rel.Name, err))
	}
	return true, nil
}
