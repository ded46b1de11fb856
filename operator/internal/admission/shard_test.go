package admission_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// shardFixture is a Repository in shard "strict" with one Release of it,
// both written as the syncer would.
type shardFixture struct {
	repo *sluicev1.Repository
	rel  *sluicev1.Release
}

func newShardFixture(t *testing.T) shardFixture {
	t.Helper()
	repo := &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: uniqueName("infra"), Namespace: teamNS, Labels: map[string]string{sluicev1.LabelShard: "strict"}},
		Spec: sluicev1.RepositorySpec{
			URL: "https://git.example.com/platform/infra.git", TargetNamespaces: []string{"checkout-*"}, ServiceAccountName: "deployer",
		},
	}
	require.NoError(t, env.Client.Create(t.Context(), repo))
	rel := release()
	rel.Spec.Repository = repo.Name
	rel.Labels = map[string]string{sluicev1.LabelShard: "strict"}
	// The policies read their parameters from an informer: wait until the
	// Repository is one (a Release with another key is refused).
	forged := release()
	forged.Spec.Repository = repo.Name
	forged.Labels = map[string]string{sluicev1.LabelShard: "weak"}
	require.Eventually(t, func() bool {
		err := syncer.Create(t.Context(), forged, client.DryRunAll)
		return err != nil
	}, time.Minute, 100*time.Millisecond, "the shard-key policy sees the Repository")
	require.NoError(t, syncer.Create(t.Context(), rel))
	return shardFixture{repo: repo, rel: rel}
}

// waitReleaseParam waits until a ChangeRequest of rel with another key is
// refused: the policy's informer has the Release.
func (f shardFixture) waitReleaseParam(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool {
		cr := changeRequest()
		cr.Spec.Release = f.rel.Name
		cr.Labels = map[string]string{sluicev1.LabelShard: "weak"}
		return syncer.Create(t.Context(), cr, client.DryRunAll) != nil
	}, time.Minute, 100*time.Millisecond, "the shard-key policy sees the Release")
}

func TestShard_releaseWithAnotherKeyThanItsRepositoryIsRefused(t *testing.T) {
	f := newShardFixture(t)
	forged := release()
	forged.Spec.Repository = f.repo.Name
	forged.Labels = map[string]string{sluicev1.LabelShard: "weak"}
	requireDenied(t, syncer.Create(t.Context(), forged), "must carry the shard key of its Repository", `"strict"`)

	// Without a key at all it is refused too: it would land on the
	// unsharded replicas.
	unkeyed := release()
	unkeyed.Spec.Repository = f.repo.Name
	requireDenied(t, syncer.Create(t.Context(), unkeyed), "must carry the shard key")
}

func TestShard_changeOrApprovalMovedToAWeakerShardIsRefused(t *testing.T) {
	f := newShardFixture(t)
	f.waitReleaseParam(t)

	// The syncer's own change, in the Release's shard, is allowed.
	cr := changeRequest()
	cr.Name = f.rel.Name + "-0123456789"
	cr.Spec.Release = f.rel.Name
	cr.Labels = map[string]string{sluicev1.LabelShard: "strict"}
	require.NoError(t, syncer.Create(t.Context(), cr))

	// A forged key on create: refused.
	forged := changeRequest()
	forged.Spec.Release = f.rel.Name
	forged.Labels = map[string]string{sluicev1.LabelShard: "weak"}
	requireDenied(t, syncer.Create(t.Context(), forged), "must carry its shard key", `"strict"`)

	// Someone with update rights moving the change to another shard:
	// refused (by the syncer-only rule and by the key rule, whichever the
	// API server reports).
	moved := cr.DeepCopy()
	moved.Labels[sluicev1.LabelShard] = "weak"
	requireDenied(t, alice.Update(t.Context(), moved), "sharding.sluice.dev/key")
	// Nor may they drop the key (the unsharded replicas would take it).
	dropped := cr.DeepCopy()
	delete(dropped.Labels, sluicev1.LabelShard)
	requireDenied(t, alice.Update(t.Context(), dropped), "sharding.sluice.dev/key")

	// An Approval in another shard than its Release: refused.
	me := whoAmI(t, aliceCfg)
	a := approval("k8s:"+sluicev1.Identity(me.Username), me.Groups, sluicev1.SourceKubernetes)
	a.Spec.Release = f.rel.Name
	a.Spec.ChangeRequest = cr.Name
	a.Labels = map[string]string{sluicev1.LabelShard: "weak"}
	requireDenied(t, alice.Create(t.Context(), a), "an Approval of Release", "must carry its shard key")
	// With the Release's key it is allowed, and cannot be moved later.
	a.Labels[sluicev1.LabelShard] = "strict"
	require.NoError(t, alice.Create(t.Context(), a))
	a.Labels[sluicev1.LabelShard] = "weak"
	requireDenied(t, alice.Update(t.Context(), a), "sharding.sluice.dev/key")
}

func TestShard_syncerMovesARepositorysObjectsInOrder(t *testing.T) {
	f := newShardFixture(t)
	f.waitReleaseParam(t)
	cr := changeRequest()
	cr.Spec.Release = f.rel.Name
	cr.Labels = map[string]string{sluicev1.LabelShard: "strict"}
	require.NoError(t, syncer.Create(t.Context(), cr))

	// The syncer may not move the Release ahead of its Repository...
	rel := f.rel.DeepCopy()
	rel.Labels[sluicev1.LabelShard] = "other"
	requireDenied(t, syncer.Update(t.Context(), rel), "must carry the shard key of its Repository")

	// ...but after an admin relabelled the Repository, it moves the
	// Release and then the change.
	repo := f.repo.DeepCopy()
	repo.Labels[sluicev1.LabelShard] = "other"
	require.NoError(t, env.Client.Update(t.Context(), repo))
	require.Eventually(t, func() bool {
		cur := &sluicev1.Release{}
		require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(f.rel), cur))
		cur.Labels[sluicev1.LabelShard] = "other"
		return syncer.Update(t.Context(), cur) == nil
	}, time.Minute, 100*time.Millisecond, "the syncer moves the Release once the policy sees the relabelled Repository")
	require.Eventually(t, func() bool {
		cur := &sluicev1.ChangeRequest{}
		require.NoError(t, env.Client.Get(t.Context(), client.ObjectKeyFromObject(cr), cur))
		cur.Labels[sluicev1.LabelShard] = "other"
		return syncer.Update(t.Context(), cur) == nil
	}, time.Minute, 100*time.Millisecond, "the syncer moves the change after its Release")
}

func TestShard_reviewConfigMapWithAnotherKeyIsRefused(t *testing.T) {
	f := newShardFixture(t)
	f.waitReleaseParam(t)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		Name: uniqueName("review"), Namespace: teamNS,
		Labels: map[string]string{review.LabelReview: "true", sluicev1.LabelRelease: f.rel.Name, sluicev1.LabelShard: "weak"},
	}}
	requireDenied(t, syncer.Create(t.Context(), cm), "a review ConfigMap of Release", "must carry its shard key")
	cm.Labels[sluicev1.LabelShard] = "strict"
	require.NoError(t, syncer.Create(t.Context(), cm))
	cm.Labels[sluicev1.LabelShard] = "weak"
	requireDenied(t, alice.Update(t.Context(), cm), "sharding.sluice.dev/key")
}
