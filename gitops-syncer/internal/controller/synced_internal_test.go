package controller

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// setSynced writes with the Release it was given; when that write
// conflicts (the operator wrote meanwhile), it reads the Release again and
// keeps what the operator wrote.
func TestSetSynced_aConflictReadsAgainAndKeepsTheOperatorsConditions(t *testing.T) {
	scheme := testenv.Scheme()
	stale := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: "web-prod", Namespace: "ctl", UID: "u1"}}
	stored := stale.DeepCopy()
	meta.SetStatusCondition(&stored.Status.Conditions, metav1.Condition{Type: sluicev1.ConditionReady, Status: metav1.ConditionFalse, Reason: sluicev1.ReasonAwaitingApprovals, Message: "the operator's"})

	patches := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stored).WithStatusSubresource(stored).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				patches++
				if patches == 1 {
					return apierrors.NewConflict(schema.GroupResource{Group: sluicev1.GroupVersion.Group, Resource: "releases"}, obj.GetName(), errors.New("the operator wrote first"))
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	r := &RepositoryReconciler{Client: c, APIReader: c}

	require.NoError(t, r.setSynced(context.Background(), stale, metav1.ConditionTrue, sluicev1.ReasonSucceeded, "web-prod-0123456789 holds the inputs"))
	require.Equal(t, 2, patches, "one conflict, one write after a fresh read")
	got := &sluicev1.Release{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(stale), got))
	synced := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionSynced)
	require.NotNil(t, synced)
	require.Equal(t, metav1.ConditionTrue, synced.Status)
	require.NotNil(t, meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionReady), "the operator's condition is kept")

	// Saying the same again writes nothing.
	require.NoError(t, r.setSynced(context.Background(), got, metav1.ConditionTrue, sluicev1.ReasonSucceeded, "web-prod-0123456789 holds the inputs"))
	require.Equal(t, 2, patches)
}

// recordSynced writes the syncer's status fields and Synced in one status
// write; after a conflict it reads again, keeps what the operator wrote
// and still writes both; recording the same change again writes nothing.
func TestRecordSynced_fieldsAndConditionInOneWrite(t *testing.T) {
	scheme := testenv.Scheme()
	stale := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: "web-prod", Namespace: "ctl", UID: "u1"}}
	stale.Status.LastSyncedTree, stale.Status.LastSyncedCommit, stale.Status.LatestChange = "tree-0", "c0", "web-prod-c0"
	stored := stale.DeepCopy()
	stored.Status.AppliedChange = "web-prod-c0"
	meta.SetStatusCondition(&stored.Status.Conditions, metav1.Condition{Type: sluicev1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Applied", Message: "the operator's"})

	patches := 0
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(stored).WithStatusSubresource(stored).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
				patches++
				if patches == 1 {
					return apierrors.NewConflict(schema.GroupResource{Group: sluicev1.GroupVersion.Group, Resource: "releases"}, obj.GetName(), errors.New("the operator wrote first"))
				}
				return c.SubResource(sub).Patch(ctx, obj, patch, opts...)
			},
		}).Build()
	r := &RepositoryReconciler{Client: c, APIReader: c}
	rev := "0123456789abcdef0123456789abcdef01234567"
	plan := &changePlan{release: stale, revision: rev, tree: "tree-1"}
	cr := &sluicev1.ChangeRequest{ObjectMeta: metav1.ObjectMeta{Name: "web-prod-0123456789", Namespace: "ctl"}}

	require.NoError(t, r.recordSynced(context.Background(), plan, cr))
	require.Equal(t, 2, patches, "one conflict, then one write of fields and condition together")
	got := &sluicev1.Release{}
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(stale), got))
	require.Equal(t, "tree-1", got.Status.LastSyncedTree)
	require.Equal(t, rev, got.Status.LastSyncedCommit)
	require.Equal(t, "web-prod-0123456789", got.Status.LatestChange)
	require.Equal(t, "web-prod-c0", got.Status.AppliedChange, "the operator's field is kept")
	require.NotNil(t, meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionReady), "the operator's condition is kept")
	synced := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionSynced)
	require.NotNil(t, synced)
	require.Equal(t, metav1.ConditionTrue, synced.Status)
	require.Equal(t, got.Status, stale.Status, "the Release given holds what was written")

	// The same change again: nothing to write.
	require.NoError(t, r.recordSynced(context.Background(), plan, cr))
	require.Equal(t, 2, patches)
	// A new tree alone (same condition text) is still written.
	plan.tree = "tree-2"
	require.NoError(t, r.recordSynced(context.Background(), plan, cr))
	require.Equal(t, 3, patches)
	require.NoError(t, c.Get(context.Background(), client.ObjectKeyFromObject(stale), got))
	require.Equal(t, "tree-2", got.Status.LastSyncedTree)
}
