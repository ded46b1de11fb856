package controller_test

import (
	"context"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/shardwatch"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// startShardSyncer starts a syncer of shard key watching ns.
func startShardSyncer(t *testing.T, ns, key string) *runningSyncer {
	t.Helper()
	return startSyncerWith(t, syncer.Options{
		ArtifactAddr: "127.0.0.1:0", DataDir: t.TempDir(), AllowFileURLs: true,
		Namespaces: []string{ns}, Validator: validator, SkipNameValidation: true, Shard: key,
		// The other tests' syncers register their metrics without the
		// shard label: a shard's cannot join them in one registry.
		Registry: prometheus.NewRegistry(),
	})
}

// inShard labels a Repository with shard key.
func inShard(key string) func(*sluicev1.Repository) {
	return func(r *sluicev1.Repository) { sluicev1.SetShard(r, key) }
}

// requireAllInShard checks that every Release and ChangeRequest of repo,
// and every review ConfigMap of those changes, carries shard key.
func requireAllInShard(t *testing.T, ns, repo, key string) {
	t.Helper()
	ctx := context.Background()
	var rels sluicev1.ReleaseList
	require.NoError(t, k8s.List(ctx, &rels, client.InNamespace(ns), client.MatchingLabels{sluicev1.LabelRepository: repo}))
	require.NotEmpty(t, rels.Items)
	for _, r := range rels.Items {
		require.Equal(t, key, sluicev1.ShardOf(&r), "Release %s", r.Name)
	}
	var crs sluicev1.ChangeRequestList
	require.NoError(t, k8s.List(ctx, &crs, client.InNamespace(ns), client.MatchingLabels{sluicev1.LabelRepository: repo}))
	require.NotEmpty(t, crs.Items)
	for _, cr := range crs.Items {
		require.Equal(t, key, sluicev1.ShardOf(&cr), "ChangeRequest %s", cr.Name)
		cm := &corev1.ConfigMap{}
		err := k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: review.ConfigMapName(cr.Name)}, cm)
		if apierrors.IsNotFound(err) {
			continue
		}
		require.NoError(t, err)
		require.Equal(t, key, sluicev1.ShardOf(cm), "review ConfigMap of %s", cr.Name)
	}
}

func TestShard_twoSyncersOfDifferentShardsSyncOnlyTheirOwnRepositories(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fa := seedHelmRepo(t, root, "infra-a")
	// Other services than infra-a's: two Repositories of one namespace
	// must not name the same Releases (whichever syncs first takes them).
	fb := gittest.NewRepo(t, root, "infra-b")
	fb.CopyDir(chartDir, "charts/service")
	helmService(fb, "gamma", "staging")
	helmService(fb, "delta", "staging")
	fb.Commit("initial catalog", "alice@example.com")
	a := startShardSyncer(t, ns, "a")
	b := startShardSyncer(t, ns, "b")
	repoA := newRepository(t, ns, "infra-a", fa.FileURL(), inShard("a"))
	repoB := newRepository(t, ns, "infra-b", fb.FileURL(), inShard("b"))
	waitHandled(t, repoA, requestReconcile(t, repoA))
	waitHandled(t, repoB, requestReconcile(t, repoB))

	// Everything a Repository's syncer wrote carries its key.
	requireAllInShard(t, ns, "infra-a", "a")
	requireAllInShard(t, ns, "infra-b", "b")
	// Each syncer's cache holds its own shard only.
	for _, tc := range []struct {
		s    *runningSyncer
		repo string
	}{{a, "infra-a"}, {b, "infra-b"}} {
		var repos sluicev1.RepositoryList
		require.NoError(t, tc.s.Manager.GetCache().List(context.Background(), &repos, client.InNamespace(ns)))
		require.Len(t, repos.Items, 1)
		require.Equal(t, tc.repo, repos.Items[0].Name)
		var rels sluicev1.ReleaseList
		require.NoError(t, tc.s.Manager.GetCache().List(context.Background(), &rels, client.InNamespace(ns)))
		for _, r := range rels.Items {
			require.Equal(t, tc.repo, r.Spec.Repository, "the syncer caches only its shard's Releases")
		}
	}
}

func TestShard_aRelabelledRepositoryMovesItsObjectsWhenTheirLockIsFree(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	startShardSyncer(t, ns, "a")
	startShardSyncer(t, ns, "b")
	repo := newRepository(t, ns, "infra", fixture.FileURL(), inShard("a"))
	waitHandled(t, repo, requestReconcile(t, repo))
	requireAllInShard(t, ns, "infra", "a")
	before := changeRequests(t, ns)
	require.Len(t, before, 2)

	// alpha's change holds its Release's apply lock, not ended: as if
	// shard a's operator were applying it.
	alpha := getRelease(t, ns, "alpha-staging")
	var holder string
	for name, cr := range before {
		if cr.Spec.Release == alpha.Name {
			holder = name
		}
	}
	require.NotEmpty(t, holder)
	alpha.Status.CurrentChange = holder
	require.NoError(t, k8s.Status().Update(context.Background(), alpha))

	// A platform admin moves the Repository to shard b.
	cur := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(repo), cur))
	sluicev1.SetShard(cur, "b")
	require.NoError(t, k8s.Update(context.Background(), cur))

	// beta moves at once; alpha waits for its lock, and the Repository
	// says so.
	cond := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonShardMoving)
	require.Contains(t, cond.Message, "alpha-staging")
	require.NotContains(t, cond.Message, "beta-staging")
	require.Equal(t, "b", sluicev1.ShardOf(getRelease(t, ns, "beta-staging")))
	require.Equal(t, "a", sluicev1.ShardOf(getRelease(t, ns, "alpha-staging")), "a Release whose lock is held stays on its shard")
	require.Equal(t, "a", sluicev1.ShardOf(ptr(before[holder])))

	// The holder ends (applied on shard a): alpha moves too.
	h := &sluicev1.ChangeRequest{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: holder}, h))
	h.Status.Phase = sluicev1.PhaseApplied
	require.NoError(t, k8s.Status().Update(context.Background(), h))
	require.Eventually(t, func() bool {
		got := &sluicev1.Repository{}
		require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(repo), got))
		c := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionReady)
		return c != nil && c.Reason != sluicev1.ReasonShardMoving
	}, 2*time.Minute, 50*time.Millisecond, "the move ends")
	requireAllInShard(t, ns, "infra", "b")
	require.Len(t, changeRequests(t, ns), 2, "moving created nothing")
}

func ptr[T any](v T) *T { return &v }

func TestShardWatch_aShardWithoutALiveLeaseIsShownDownOnItsRepositories(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	repoA := newRepository(t, ns, "infra-a", "https://git.example.com/a.git", inShard("a"))
	newRepository(t, ns, "infra-plain", "https://git.example.com/plain.git")
	reg := prometheus.NewRegistry()
	now := time.Now()
	w, err := shardwatch.New(reg, shardwatch.Watch{
		Client: k8s, APIReader: k8s, LeaseNamespace: ns, Namespaces: []string{ns},
		Leases: map[string]string{"syncer": syncer.LeaderElectionID, "operator": sluicev1.OperatorLeaseName},
		Now:    func() time.Time { return now },
	})
	require.NoError(t, err)

	shardCondition := func(name string) *metav1.Condition {
		got := &sluicev1.Repository{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, got))
		return meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionShardAvailable)
	}
	gauge := func(name string, labels ...string) float64 {
		families, err := reg.Gather()
		require.NoError(t, err)
		for _, f := range families {
			if f.GetName() != name {
				continue
			}
		metrics:
			for _, m := range f.GetMetric() {
				for i, l := range m.GetLabel() {
					if l.GetValue() != labels[i] {
						continue metrics
					}
				}
				return m.GetGauge().GetValue()
			}
		}
		return -1
	}

	// No Lease at all: shard a is down.
	require.NoError(t, w.Check(ctx))
	c := shardCondition(repoA.Name)
	require.NotNil(t, c)
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Equal(t, sluicev1.ReasonShardDown, c.Reason)
	require.Contains(t, c.Message, `shard "a"`)
	require.Contains(t, c.Message, "operator and syncer")
	require.Nil(t, shardCondition("infra-plain"), "an unsharded Repository gets no condition")
	require.Equal(t, 0.0, gauge("sluice_shard_up", "operator", "a"))
	require.Equal(t, 1.0, gauge("sluice_shard_repositories", "a"))

	// Both components renew their Leases: up.
	lease := func(base string, renewed time.Time) {
		holder := "pod-1"
		l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ShardLeaseName(base, "a"), Namespace: ns},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: ptr(int32(60)), RenewTime: &metav1.MicroTime{Time: renewed}}}
		err := k8s.Create(ctx, l)
		if apierrors.IsAlreadyExists(err) {
			cur := &coordinationv1.Lease{}
			require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(l), cur))
			cur.Spec = l.Spec
			err = k8s.Update(ctx, cur)
		}
		require.NoError(t, err)
	}
	lease(syncer.LeaderElectionID, now)
	lease(sluicev1.OperatorLeaseName, now)
	require.NoError(t, w.Check(ctx))
	c = shardCondition(repoA.Name)
	require.Equal(t, metav1.ConditionTrue, c.Status)
	require.Equal(t, sluicev1.ReasonShardLive, c.Reason)
	require.Equal(t, 1.0, gauge("sluice_shard_up", "operator", "a"))

	// The operator stops renewing: after its lease duration, down again,
	// naming it.
	lease(sluicev1.OperatorLeaseName, now.Add(-2*time.Minute))
	require.NoError(t, w.Check(ctx))
	c = shardCondition(repoA.Name)
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Contains(t, c.Message, "Lease of its operator")
	require.Equal(t, 0.0, gauge("sluice_shard_up", "operator", "a"))
	require.Equal(t, 1.0, gauge("sluice_shard_up", "syncer", "a"))

	// Nothing changed: nothing is written.
	before := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(repoA), before))
	require.NoError(t, w.Check(ctx))
	after := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(repoA), after))
	require.Equal(t, before.ResourceVersion, after.ResourceVersion)
}
