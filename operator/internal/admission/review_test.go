package admission_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// reviewConfigMap is the review ConfigMap of cr as the syncer stores it:
// labelled, controlled by cr, stamped with its approvalDigest.
func reviewConfigMap(cr *sluicev1.ChangeRequest) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: review.ConfigMapName(cr.Name), Namespace: cr.Namespace,
			Labels:          map[string]string{review.LabelReview: "true", sluicev1.LabelRelease: cr.Spec.Release},
			Annotations:     map[string]string{review.AnnotationApprovalDigest: string(cr.Spec.ApprovalDigest)},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cr, sluicev1.GroupVersion.WithKind("ChangeRequest"))},
		},
		BinaryData: map[string][]byte{review.DataKey: []byte("the plan the approver reads")},
	}
}

// TestReviewConfigMap_onlyTheSyncerWritesOne: alice may write ConfigMaps
// in the control namespace. She forges the review of a change (an owner
// reference to the ChangeRequest, its digest) to show an approver a plan
// other than the one proposed: refused, as is the operator; the syncer's
// is stored. She cannot then rewrite the syncer's review, re-stamp its
// digest or hand it to another change; other metadata stays hers to
// change, and ConfigMaps that are not reviews are not Sluice's business.
func TestReviewConfigMap_onlyTheSyncerWritesOne(t *testing.T) {
	ctx := context.Background()
	require.NoError(t, syncer.Create(ctx, release()))
	cr := changeRequest()
	require.NoError(t, syncer.Create(ctx, cr))

	forged := reviewConfigMap(cr)
	forged.BinaryData[review.DataKey] = []byte("a harmless plan")
	requireDenied(t, alice.Create(ctx, forged), "sluice-reviews", "only the gitops-syncer's ServiceAccount may create a review ConfigMap", "alice may not")
	requireDenied(t, operator.Create(ctx, reviewConfigMap(cr)), "may create a review ConfigMap")

	stored := reviewConfigMap(cr)
	require.NoError(t, syncer.Create(ctx, stored))

	edits := map[string]func(cm *corev1.ConfigMap){
		"its data": func(cm *corev1.ConfigMap) { cm.BinaryData[review.DataKey] = []byte("a harmless plan") },
		"its digest": func(cm *corev1.ConfigMap) {
			cm.Annotations[review.AnnotationApprovalDigest] = string(digest("other content"))
		},
		"its label":  func(cm *corev1.ConfigMap) { delete(cm.Labels, review.LabelReview) },
		"its owners": func(cm *corev1.ConfigMap) { cm.OwnerReferences[0].UID = types.UID("another-change") },
	}
	for what, edit := range edits {
		var live corev1.ConfigMap
		require.NoError(t, alice.Get(ctx, client.ObjectKeyFromObject(stored), &live))
		edit(&live)
		requireDenied(t, alice.Update(ctx, &live), "may change a review ConfigMap's data")
		t.Logf("editing %s: denied", what)
	}

	var live corev1.ConfigMap
	require.NoError(t, alice.Get(ctx, client.ObjectKeyFromObject(stored), &live))
	live.Labels["example.com/seen"] = "true"
	require.NoError(t, alice.Update(ctx, &live), "other metadata stays writable")
	require.NoError(t, alice.Get(ctx, client.ObjectKeyFromObject(stored), &live))
	live.OwnerReferences = nil
	require.NoError(t, alice.Update(ctx, &live), "owners may be removed (the garbage collector orphans)")

	// An unlabelled ConfigMap, even one naming the change as its owner, is
	// not a review: admission lets it be and diff refuses to show it.
	other := reviewConfigMap(cr)
	other.Name, other.Labels = uniqueName("not-a-review"), nil
	require.NoError(t, alice.Create(ctx, other))
}
