package controller

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

func releaseCondition(rel *sluicev1.Release, t string) *metav1.Condition {
	return meta.FindStatusCondition(rel.Status.Conditions, t)
}

func TestRelease_summarisesTheAppliedChangeAndKeepsTheSyncersFields(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rule := sluicev1.ApprovalRule{Required: 1, Approvers: ids("k8s:alice"), AutoApproveRisk: sluicev1.AutoApproveLow}
	rel := f.release("checkout", "staging", rule, nil)
	require.Eventually(t, func() bool { return len(f.getRelease(rel.Name).Finalizers) == 1 }, waitFor, 50*time.Millisecond)

	// The syncer's fields, written as the syncer would (retrying when the
	// operator wrote first).
	commit := revision()
	var cur *sluicev1.Release
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur = f.getRelease(rel.Name)
		cur.Status.LastSyncedTree = "tree-1"
		cur.Status.LastSyncedCommit = commit
		meta.SetStatusCondition(&cur.Status.Conditions, metav1.Condition{Type: sluicev1.ConditionSynced, Status: metav1.ConditionTrue, Reason: sluicev1.ReasonSucceeded, Message: "synced"})
		return f.c.Status().Update(ctx(t), cur)
	}))

	cr := f.change(rel, rule, withRisk(sluicev1.RiskLow))
	got := f.phase(cr, sluicev1.PhaseApplied)
	var r *sluicev1.Release
	require.Eventually(t, func() bool {
		r = f.getRelease(rel.Name)
		c := releaseCondition(r, sluicev1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && len(r.Status.History) == 1
	}, waitFor, 50*time.Millisecond)
	require.Equal(t, cr.Name, r.Status.AppliedChange)
	require.Equal(t, cr.Spec.Revision, r.Status.AppliedRevision)
	require.Equal(t, cr.Spec.ApprovalDigest, r.Status.AppliedDigest)
	require.Equal(t, &got.Spec.Rule, r.Status.AppliedRule, "the applied rule is the rule in the change's own manifest")
	require.Empty(t, r.Status.CurrentChange)
	require.Equal(t, sluicev1.PhaseApplied, r.Status.History[0].Phase)
	require.Equal(t, metav1.ConditionFalse, releaseCondition(r, sluicev1.ConditionProgressing).Status)
	require.Equal(t, metav1.ConditionFalse, releaseCondition(r, sluicev1.ConditionDegraded).Status)
	// Untouched: the syncer's status.
	require.Equal(t, "tree-1", r.Status.LastSyncedTree)
	require.Equal(t, cur.Status.LastSyncedCommit, r.Status.LastSyncedCommit)
	require.Equal(t, metav1.ConditionTrue, releaseCondition(r, sluicev1.ConditionSynced).Status)

	// A waiting change makes the release Progressing and not Ready.
	f.nextSecondAfter(cr.CreationTimestamp.Time) // so it is the newest change
	waiting := f.change(rel, rule)
	f.waitingWith(waiting)
	require.Eventually(t, func() bool {
		r = f.getRelease(rel.Name)
		p := releaseCondition(r, sluicev1.ConditionProgressing)
		return p.Status == metav1.ConditionTrue && p.Reason == sluicev1.ReasonAwaitingApprovals &&
			releaseCondition(r, sluicev1.ConditionReady).Status == metav1.ConditionFalse
	}, waitFor, 50*time.Millisecond)
}

func TestRelease_aFailedChangeMarksTheReleaseDegraded(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client, FailReason: sluicev1.ReasonManifestMismatch}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "staging", autoApprove, nil)
	cr := f.change(rel, autoApprove)
	got := f.phase(cr, sluicev1.PhaseFailed)
	require.Equal(t, sluicev1.ReasonManifestMismatch, condition(got, sluicev1.ConditionApplied).Reason)
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		d := releaseCondition(r, sluicev1.ConditionDegraded)
		return d != nil && d.Status == metav1.ConditionTrue && r.Status.CurrentChange == "" && r.Status.AppliedChange == ""
	}, waitFor, 50*time.Millisecond)
}

func TestRelease_keepsTheNewestChangeRequestsAndDeletesOrphanedApprovals(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta, keep: 2, grace: time.Millisecond})
	rel := f.release("checkout", "staging", autoApprove, nil)
	applied := f.change(rel, autoApprove)
	f.phase(applied, sluicev1.PhaseApplied)
	approval := f.decide(applied, "k8s:alice", sluicev1.DecisionApprove)
	f.nextSecondAfter(approval.CreationTimestamp.Time) // the previews are newer
	var previews []*sluicev1.ChangeRequest
	for pr := int64(1); pr <= 3; pr++ {
		p := f.change(rel, autoApprove, asPreview(pr))
		f.decide(p, "k8s:alice", sluicev1.DecisionApprove)
		f.phase(p, sluicev1.PhasePreview)
		previews = append(previews, p)
	}
	require.Eventually(t, func() bool {
		var list sluicev1.ChangeRequestList
		require.NoError(t, f.c.List(ctx(t), &list, client.InNamespace(f.ns), client.MatchingLabels{sluicev1.LabelRelease: rel.Name}))
		return len(list.Items) == 3
	}, waitFor, 50*time.Millisecond, "two newest kept, plus the applied change")
	require.NoError(t, f.c.Get(ctx(t), client.ObjectKeyFromObject(applied), &sluicev1.ChangeRequest{}), "the applied change is never pruned")

	remaining := map[sluicev1.Digest]bool{applied.Spec.ApprovalDigest: true}
	for _, p := range previews {
		err := f.c.Get(ctx(t), client.ObjectKeyFromObject(p), &sluicev1.ChangeRequest{})
		if err == nil {
			remaining[p.Spec.ApprovalDigest] = true
		} else {
			require.True(t, apierrors.IsNotFound(err))
		}
	}
	require.Len(t, remaining, 3)
	require.Eventually(t, func() bool {
		var list sluicev1.ApprovalList
		require.NoError(t, f.c.List(ctx(t), &list, client.InNamespace(f.ns)))
		for _, a := range list.Items {
			if !remaining[a.Spec.ApprovalDigest] {
				return false
			}
		}
		return len(list.Items) == 3
	}, waitFor, 50*time.Millisecond, "only the Approvals of remaining changes are left")
}

// appliedOf waits until the Release records cr as its applied change. The
// cleanup of a deleted Release reads the applied change from there, and the
// Release reconciler writes it a moment after the change's Applied (on a
// busy machine more than a moment): a test deletes once it is recorded.
func (f *fixture) appliedOf(rel *sluicev1.Release, cr *sluicev1.ChangeRequest) {
	f.t.Helper()
	require.Eventually(f.t, func() bool { return f.getRelease(rel.Name).Status.AppliedChange == cr.Name }, waitFor, 50*time.Millisecond,
		"the Release never recorded %s as applied", cr.Name)
}

func TestRelease_deletionRunsTheAppliersCleanupBeforeTheFinalizerGoes(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "staging", autoApprove, nil)
	require.Eventually(t, func() bool { return len(f.getRelease(rel.Name).Finalizers) == 1 }, waitFor, 50*time.Millisecond)
	f.appliedOf(rel, f.phase(f.change(rel, autoApprove), sluicev1.PhaseApplied))
	// A later push moves the environment: the cleanup still removes what
	// was applied, where it was applied.
	moved := f.getRelease(rel.Name)
	orig := moved.DeepCopy()
	moved.Spec.TargetNamespace = "checkout-elsewhere"
	require.NoError(t, f.c.Patch(ctx(t), moved, client.MergeFrom(orig)))
	require.NoError(t, f.c.Delete(ctx(t), rel))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(f.c.Get(ctx(t), client.ObjectKeyFromObject(rel), &sluicev1.Release{}))
	}, waitFor, 50*time.Millisecond)
	where, cleaned := f.recordedKey("cleanup." + rel.Name)
	require.True(t, cleaned, "the applier's cleanup ran")
	require.Equal(t, "done in checkout-staging", where, "in the namespace the applied change deployed to, not the one a later push wrote")
}

func TestRelease_deletingAReleaseNeverAppliedCleansNothing(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "staging", autoApprove, nil)
	require.Eventually(t, func() bool { return len(f.getRelease(rel.Name).Finalizers) == 1 }, waitFor, 50*time.Millisecond)
	require.NoError(t, f.c.Delete(ctx(t), rel))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(f.c.Get(ctx(t), client.ObjectKeyFromObject(rel), &sluicev1.Release{}))
	}, waitFor, 50*time.Millisecond)
	_, cleaned := f.recordedKey("cleanup." + rel.Name)
	require.False(t, cleaned, "nothing was applied, so nothing is removed anywhere")
}

func TestRelease_deletingAReleaseWithTerraformSaysItsStateStays(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "staging", autoApprove, nil, func(r *sluicev1.Release) {
		r.Spec.Terraform = &sluicev1.TerraformSource{Dir: "services/checkout/terraform", Workspace: "staging"}
	})
	require.Eventually(t, func() bool { return len(f.getRelease(rel.Name).Finalizers) == 1 }, waitFor, 50*time.Millisecond)
	f.appliedOf(rel, f.phase(f.change(rel, autoApprove), sluicev1.PhaseApplied))
	require.NoError(t, f.c.Delete(ctx(t), rel))
	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(f.c.Get(ctx(t), client.ObjectKeyFromObject(rel), &sluicev1.Release{}))
	}, waitFor, 50*time.Millisecond)
	require.Eventually(t, func() bool {
		var list eventsv1.EventList
		require.NoError(t, f.c.List(ctx(t), &list, client.InNamespace(f.ns)))
		for _, e := range list.Items {
			if e.Regarding.Name == rel.Name && e.Reason == ReasonTerraformStateKept {
				return strings.Contains(e.Note, "tfstate-staging-"+rel.Name)
			}
		}
		return false
	}, waitFor, 100*time.Millisecond, "an Event says the state stays")
}

func TestRelease_aLockHeldByAVanishedChangeIsFreed(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	startOperator(t, f.ns, operatorConfig{applier: ta})
	rel := f.release("checkout", "staging", autoApprove, nil)
	require.Eventually(t, func() bool { return len(f.getRelease(rel.Name).Finalizers) == 1 }, waitFor, 50*time.Millisecond)
	f.setLock(rel.Name, "checkout-staging-gone")
	require.Eventually(t, func() bool { return f.getRelease(rel.Name).Status.CurrentChange == "" }, waitFor, 50*time.Millisecond)
	cr := f.change(rel, autoApprove)
	f.phase(cr, sluicev1.PhaseApplied)
}

// staleChangeCache reads from the API server like a cache that has not yet
// seen hidden: it lists without field selectors (the API server has no
// spec.release index) and filters by the spec.release the caller asked for.
func staleChangeCache(t *testing.T, hidden string) client.Client {
	t.Helper()
	c, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	return interceptor.NewClient(c, interceptor.Funcs{
		List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			lo := (&client.ListOptions{}).ApplyOptions(opts)
			release, _ := lo.FieldSelector.RequiresExactMatch(IndexRelease)
			if err := c.List(ctx, list, client.InNamespace(lo.Namespace)); err != nil {
				return err
			}
			switch l := list.(type) {
			case *sluicev1.ChangeRequestList:
				l.Items = slices.DeleteFunc(l.Items, func(cr sluicev1.ChangeRequest) bool {
					return cr.Name == hidden || cr.Spec.Release != release
				})
			case *sluicev1.ApprovalList:
				l.Items = slices.DeleteFunc(l.Items, func(a sluicev1.Approval) bool { return a.Spec.Release != release })
			}
			return nil
		},
	})
}

func TestRelease_approvalGCKeepsTheApprovalOfAChangeTheCacheHasNotSeen(t *testing.T) {
	f := newFixture(t)
	rel := f.release("checkout", "staging", autoApprove, nil)
	fresh := f.change(rel, autoApprove)
	kept := f.decide(fresh, "k8s:alice", sluicev1.DecisionApprove)
	gone := f.change(rel, autoApprove)
	orphan := f.decide(gone, "k8s:alice", sluicev1.DecisionApprove)
	require.NoError(t, f.c.Delete(ctx(t), gone))

	r := &ReleaseReconciler{
		Client:              staleChangeCache(t, fresh.Name),
		APIReader:           env.Client,
		ApprovalGracePeriod: time.Millisecond,
		Now:                 func() time.Time { return time.Now().Add(time.Hour) },
	}
	for range 2 {
		_, err := r.Reconcile(ctx(t), reconcile.Request{NamespacedName: client.ObjectKeyFromObject(rel)})
		require.NoError(t, err)
	}
	require.NoError(t, f.c.Get(ctx(t), client.ObjectKeyFromObject(kept), &sluicev1.Approval{}),
		"the approval of a change that exists but is not in the cache is kept")
	err := f.c.Get(ctx(t), client.ObjectKeyFromObject(orphan), &sluicev1.Approval{})
	require.True(t, apierrors.IsNotFound(err), "the approval of a deleted change is collected: %v", err)
}

// A pass that fails (here: pruning an old ChangeRequest) does not claim the
// generation it failed on: observedGeneration moves only with a pass that
// ended without an error, so a user can tell the two apart.
func TestRelease_aFailedPassDoesNotMoveObservedGeneration(t *testing.T) {
	f := newFixture(t)
	ta := &testapplier.Applier{Client: env.Client}
	var failing atomic.Bool
	var failed atomic.Int32
	startOperator(t, f.ns, operatorConfig{applier: ta, keep: 1, failDelete: func(obj client.Object) error {
		if _, ok := obj.(*sluicev1.ChangeRequest); ok && failing.Load() {
			failed.Add(1)
			return apierrors.NewServiceUnavailable("the API server is away")
		}
		return nil
	}})
	rel := f.release("checkout", "staging", autoApprove, nil)
	first := f.phase(f.change(rel, autoApprove), sluicev1.PhaseApplied)
	require.Eventually(t, func() bool {
		r := f.getRelease(rel.Name)
		return r.Status.ObservedGeneration == r.Generation && meta.IsStatusConditionTrue(r.Status.Conditions, sluicev1.ConditionReady)
	}, waitFor, 50*time.Millisecond)

	failing.Store(true)
	f.nextSecondAfter(first.CreationTimestamp.Time) // a second apart, so the next change is newer
	f.phase(f.change(rel, autoApprove), sluicev1.PhaseApplied)
	require.Eventually(t, func() bool { return failed.Load() > 0 }, waitFor, 50*time.Millisecond, "pruning the first change fails")
	var updated *sluicev1.Release
	require.Eventually(t, func() bool {
		updated = f.getRelease(rel.Name)
		updated.Spec.Values = []sluicev1.RelativePath{"services/checkout/values.yaml"}
		return f.c.Update(ctx(t), updated) == nil
	}, waitFor, 50*time.Millisecond)
	seen := failed.Load()
	require.Eventually(t, func() bool { return failed.Load() >= seen+2 }, waitFor, 50*time.Millisecond, "two more failed passes on the new generation")
	got := f.getRelease(rel.Name)
	require.Equal(t, updated.Generation-1, got.Status.ObservedGeneration, "a failed pass leaves observedGeneration behind")

	failing.Store(false)
	require.Eventually(t, func() bool {
		got = f.getRelease(rel.Name)
		return got.Status.ObservedGeneration == updated.Generation
	}, waitFor, 50*time.Millisecond, "the first pass that succeeds records the generation")
}
