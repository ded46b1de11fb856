package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

// shardOperator is an operator built by NewManager, as cmd/operator builds
// it, serving one shard of one namespace.
type shardOperator struct {
	shard   string
	applier *testapplier.Applier
	run     *testenv.Running
	cache   client.Reader
}

func startShard(t *testing.T, ns, shard string, a *testapplier.Applier) *shardOperator {
	t.Helper()
	o := Options{
		Appliers: applier.Registry{sluicev1.DeliveryHelm: a}, Shard: shard,
		LockRetryInterval: time.Second, SkipNameValidation: true,
	}
	// A process runs one shard: an unsharded operator's metrics (without
	// the shard label, registered by other tests of this binary) cannot
	// share the global registry with a shard's, so these record into an
	// unregistered recorder.
	o.Metrics = metrics.New(nil)
	mgr, err := NewManager(ctx(t), env.Config, ManagerOptions{
		Options:     o,
		MetricsAddr: "0", ProbeAddr: "0", PprofAddr: "0",
		Namespaces: []string{ns},
	})
	require.NoError(t, err)
	return &shardOperator{shard: shard, applier: a, run: testenv.Go(t, mgr).FailOnError(t), cache: mgr.GetCache()}
}

func (o *shardOperator) stop(t *testing.T) { require.NoError(t, o.run.Stop()) }

// inShard puts a Release in shard key.
func inShard(key string) func(*sluicev1.Release) {
	return func(r *sluicev1.Release) { sluicev1.SetShard(r, key) }
}

// changeInShard puts a ChangeRequest in shard key.
func changeInShard(key string) changeOpt {
	return func(c *sluicev1.ChangeRequest) { sluicev1.SetShard(c, key) }
}

// approvalInShard puts an Approval in shard key.
func approvalInShard(key string) approvalOpt {
	return func(a *sluicev1.Approval) { sluicev1.SetShard(a, key) }
}

// relabel moves obj to shard key as the syncer does (a merge patch of the
// label).
func (f *fixture) relabel(obj client.Object, key string) {
	f.t.Helper()
	require.NoError(f.t, f.c.Get(ctx(f.t), client.ObjectKeyFromObject(obj), obj))
	orig := obj.DeepCopyObject().(client.Object)
	sluicev1.SetShard(obj, key)
	require.NoError(f.t, f.c.Patch(ctx(f.t), obj, client.MergeFrom(orig)))
}

// moveRelease moves a Release and then its changes and Approvals to shard
// key, in the syncer's order (gitops-syncer shard.go).
func (f *fixture) moveRelease(rel *sluicev1.Release, key string, children ...client.Object) {
	f.t.Helper()
	f.relabel(rel, key)
	for _, c := range children {
		f.relabel(c, key)
	}
}

func TestShard_operatorsOfTwoShardsNeverReconcileEachOthersChanges(t *testing.T) {
	f := newFixture(t)
	a := startShard(t, f.ns, "a", &testapplier.Applier{Client: env.Client})
	b := startShard(t, f.ns, "b", &testapplier.Applier{Client: env.Client})
	none := startShard(t, f.ns, "", &testapplier.Applier{Client: env.Client})

	relA := f.release("checkout", "staging", autoApprove, nil, inShard("a"))
	relB := f.release("cart", "staging", autoApprove, nil, inShard("b"))
	relN := f.release("search", "staging", autoApprove, nil)
	crA := f.change(relA, autoApprove, changeInShard("a"))
	crB := f.change(relB, autoApprove, changeInShard("b"))
	crN := f.change(relN, autoApprove)
	for _, cr := range []*sluicev1.ChangeRequest{crA, crB, crN} {
		f.phase(cr, sluicev1.PhaseApplied)
		rec, ok := f.recorded(cr)
		require.True(t, ok)
		require.Equal(t, 1, rec.Effects, "%s applied once", cr.Name)
	}
	for _, tc := range []struct {
		op   *shardOperator
		mine *sluicev1.ChangeRequest
	}{{a, crA}, {b, crB}, {none, crN}} {
		for _, cr := range []*sluicev1.ChangeRequest{crA, crB, crN} {
			want := 0
			if cr == tc.mine {
				want = 1
			}
			require.Equal(t, want, tc.op.applier.Calls(cr.Name), "shard %q applier calls for %s", tc.op.shard, cr.Name)
		}
		// Nor does its cache hold another shard's objects.
		var changes sluicev1.ChangeRequestList
		require.NoError(t, tc.op.cache.List(ctx(t), &changes, client.InNamespace(f.ns)))
		require.Len(t, changes.Items, 1, "shard %q caches only its own change", tc.op.shard)
		require.Equal(t, tc.mine.Name, changes.Items[0].Name)
		var rels sluicev1.ReleaseList
		require.NoError(t, tc.op.cache.List(ctx(t), &rels, client.InNamespace(f.ns)))
		require.Len(t, rels.Items, 1, "shard %q caches only its own Release", tc.op.shard)
	}
	// Each Release was summarised by its own shard only.
	for _, rel := range []*sluicev1.Release{relA, relB, relN} {
		require.Eventually(t, func() bool { return f.getRelease(rel.Name).Status.AppliedChange != "" }, waitFor, 50*time.Millisecond)
	}
}

func TestShard_aReleaseMovedMidFlightFinishesItsChangeOnceOnTheNewShard(t *testing.T) {
	f := newFixture(t)
	a := startShard(t, f.ns, "a", &testapplier.Applier{Client: env.Client})
	b := startShard(t, f.ns, "b", &testapplier.Applier{Client: env.Client})

	rule := sluicev1.ApprovalRule{Required: 1}
	rel := f.release("checkout", "prod", rule, nil, inShard("a"))
	cr := f.change(rel, rule, changeInShard("a"))
	f.phase(cr, sluicev1.PhaseAwaitingApproval)

	// The Repository is relabelled; the syncer moves the Release (its
	// lock is free), then the change. The approval comes on the new shard.
	f.moveRelease(rel, "b", cr)
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove, approvalInShard("b"))
	f.phase(cr, sluicev1.PhaseApplied)
	rec, ok := f.recorded(cr)
	require.True(t, ok)
	require.Equal(t, 1, rec.Effects, "applied exactly once")
	require.Equal(t, 1, b.applier.Calls(cr.Name), "the new shard applied it")
	require.Equal(t, 0, a.applier.Calls(cr.Name), "the old shard never did")
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		return r.Status.AppliedChange == cr.Name && r.Status.CurrentChange == ""
	}, waitFor, 50*time.Millisecond, "the new shard recorded it on the Release and freed the lock")
}

func TestShard_theOldShardTakesNoLockOnAReleaseThatMoved(t *testing.T) {
	f := newFixture(t)
	a := startShard(t, f.ns, "a", &testapplier.Applier{Client: env.Client})
	rule := sluicev1.ApprovalRule{Required: 1}
	rel := f.release("checkout", "prod", rule, nil, inShard("a"))
	cr := f.change(rel, rule, changeInShard("a"))
	f.phase(cr, sluicev1.PhaseAwaitingApproval)

	// Only the Release moved so far (the syncer is between its writes),
	// and the approval reaches the old shard, whose cache still has the
	// change: it must not take the lock of a Release of another shard.
	f.relabel(rel, "b")
	f.decide(cr, "k8s:alice", sluicev1.DecisionApprove, approvalInShard("a"))
	require.Never(t, func() bool {
		return f.getRelease(rel.Name).Status.CurrentChange != "" || f.get(cr).Status.Phase == sluicev1.PhaseApplying
	}, 3*time.Second, 100*time.Millisecond, "the old shard takes no lock on a Release that moved away")
	require.Equal(t, 0, a.applier.Calls(cr.Name))

	// The new shard picks it up once the change and its Approval move.
	b := startShard(t, f.ns, "b", &testapplier.Applier{Client: env.Client})
	var approvals sluicev1.ApprovalList
	require.NoError(t, f.c.List(ctx(t), &approvals, client.InNamespace(f.ns)))
	children := []client.Object{cr}
	for i := range approvals.Items {
		children = append(children, &approvals.Items[i])
	}
	for _, c := range children {
		f.relabel(c, "b")
	}
	f.phase(cr, sluicev1.PhaseApplied)
	rec, _ := f.recorded(cr)
	require.Equal(t, 1, rec.Effects)
	require.Equal(t, 1, b.applier.Calls(cr.Name))
	require.Equal(t, 0, a.applier.Calls(cr.Name))
}

func TestShard_aShardKilledMidApplyResumesOnRestartWithoutApplyingTwice(t *testing.T) {
	f := newFixture(t)
	slow := newBlocker()
	first := &testapplier.Applier{Client: env.Client, BeforeEffect: slow.hook}
	a := startShard(t, f.ns, "a", first)
	b := startShard(t, f.ns, "b", &testapplier.Applier{Client: env.Client})

	rel := f.release("checkout", "staging", autoApprove, nil, inShard("a"))
	cr := f.change(rel, autoApprove, changeInShard("a"))
	waitClosed(t, slow.reached, "shard a's applier to start")
	a.stop(t) // shard a dies mid-apply
	require.Equal(t, sluicev1.PhaseApplying, f.get(cr).Status.Phase)

	// Shard b goes on with its own work and never touches shard a's.
	relB := f.release("cart", "staging", autoApprove, nil, inShard("b"))
	crB := f.change(relB, autoApprove, changeInShard("b"))
	f.phase(crB, sluicev1.PhaseApplied)
	require.Equal(t, sluicev1.PhaseApplying, f.get(cr).Status.Phase, "shard a's change waits for shard a")
	require.Equal(t, 0, b.applier.Calls(cr.Name))

	second := &testapplier.Applier{Client: env.Client}
	startShard(t, f.ns, "a", second)
	f.phase(cr, sluicev1.PhaseApplied)
	rec, ok := f.recorded(cr)
	require.True(t, ok)
	require.Equal(t, 1, rec.Effects, "the change's effect happened once")
	require.Equal(t, 1, second.Calls(cr.Name))
	require.Equal(t, 0, b.applier.Calls(cr.Name))
}

// TestShard_cacheSelectsTheShard checks the cache configuration itself:
// every Sluice kind of a Repository's work is selected by the shard label.
func TestShard_cacheSelectsTheShard(t *testing.T) {
	for key, want := range map[string]string{"a": sluicev1.LabelShard + "=a", "": "!" + sluicev1.LabelShard} {
		by := ShardCache(key)
		require.Len(t, by, 4)
		for obj, c := range by {
			require.Equal(t, want, c.Label.String(), "%T", obj)
		}
	}
}

func TestShard_aReleaseOfAnotherShardInTheTargetNamespaceStillSetsTheRule(t *testing.T) {
	f := newFixture(t)
	startShard(t, f.ns, "a", &testapplier.Applier{Client: env.Client})
	// Shard b's Release applied to checkout-prod under a rule of two
	// approvals.
	strict := sluicev1.ApprovalRule{Required: 2}
	relB := f.release("cart", "prod", strict, nil, inShard("b"), func(r *sluicev1.Release) { r.Spec.TargetNamespace = "checkout-prod" })
	relB.Status.AppliedRule = strict.DeepCopy()
	relB.Status.AppliedTargetNamespace = "checkout-prod"
	require.NoError(t, f.c.Status().Update(ctx(t), relB))

	// A new release of shard a moves into that namespace with a rule that
	// would auto-approve: the strictest rule there counts, although shard
	// a's cache holds no Release of shard b, and the cached gate agrees
	// with the hand-off's (no approval that the hand-off takes back).
	relA := f.release("checkout", "prod", autoApprove, nil, inShard("a"))
	cr := f.change(relA, autoApprove, changeInShard("a"))
	got := f.phase(cr, sluicev1.PhaseAwaitingApproval)
	c := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionApproved)
	require.NotNil(t, c)
	require.NotEqual(t, sluicev1.ReasonGateFailedAtHandOff, c.Reason, "decided on the cache as at the hand-off: %s", c.Message)
	require.Equal(t, int32(2), got.Status.EffectiveRule.Required)
}
