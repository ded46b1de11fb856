package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/podhealth"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// MaxHistory is the number of terminal changes kept in Release.status.history.
const MaxHistory = 20

// ReleaseReconciler summarises a Release from its ChangeRequests (Ready,
// Progressing, Degraded, the applied change and rule, a short history),
// deletes old terminal ChangeRequests beyond the newest KeepChangeRequests
// and Approvals that no remaining change needs, repairs an apply lock left
// by a finished or deleted change, and on deletion runs the applier's
// cleanup before letting the Release go.
//
// It never touches the syncer's status fields (lastSyncedTree,
// lastSyncedCommit, latestChange, the Synced condition): its status write is
// a merge patch of its own fields carrying the resourceVersion read.
//
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=get;list;watch;patch;update
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases/finalizers,verbs=update
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=changerequests;approvals,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=list;watch
type ReleaseReconciler struct {
	Client    client.Client
	APIReader client.Reader
	Recorder  events.EventRecorder
	Appliers  applier.Registry
	// KeepChangeRequests per Release; 20 when zero.
	KeepChangeRequests int
	// ApprovalGracePeriod before an orphaned Approval is deleted; 10m when
	// zero. It keeps an Approval given just before its ChangeRequest is
	// created (a ChangeRequest only missing from the cache is caught by a
	// live read).
	ApprovalGracePeriod time.Duration
	// LockRetryInterval is how often a lock held by a live change that is
	// not one of the release's own (a manual edit) is looked at again;
	// 30s when zero.
	LockRetryInterval time.Duration
	// Shard is the shard key served (Options.Shard): an object of another
	// shard, seen while the cache catches up with a move, is left alone.
	Shard string
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// releaseScope is the state of one pass over one Release.
type releaseScope struct {
	rel *sluicev1.Release
	// patch holds rel as it was at the start of the pass and writes the
	// operator's status fields once, at the end.
	patch *reconcile.Helper[*sluicev1.Release]
	// summary points at rel's conditions and observedGeneration.
	summary reconcile.Summary
	changes []sluicev1.ChangeRequest // newest first
	// all are the changes before retention deleted the oldest.
	all []sluicev1.ChangeRequest
	// after is the soonest a step asked to look again (zero: never).
	after time.Duration
	// stuck is the first stuck pod of the applied workload (health.go).
	stuck *podhealth.Problem
	// afterWrite run once the pass's status write is stored (Events of
	// what it decided).
	afterWrite []func()
}

// requeue asks to look at the release again after d at the latest; the
// pass goes on.
func (s *releaseScope) requeue(d time.Duration) {
	if d > 0 && (s.after == 0 || d < s.after) {
		s.after = d
	}
}

func (r *ReleaseReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Reconcile summarises one Release and prunes its old changes, in
// passes (see pass): a pass whose status write lost a race (the syncer, a
// change taking the lock, or a cache behind) runs again at once on the
// Release as the API server has it, rather than after a short requeue.
func (r *ReleaseReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	rel := &sluicev1.Release{}
	if err := r.Client.Get(ctx, req.NamespacedName, rel); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if sluicev1.ShardOf(rel) != r.Shard {
		// Moved to another shard; the cache has not caught up yet.
		return ctrl.Result{}, nil
	}
	return reconcile.Loop(ctx, rel, r.pass)
}

// pass runs the steps of one pass over a Release, chosen at the top: the
// delete steps (delete.go) for a Release being deleted, else the
// summary's. The summary's write the operator's status fields once, at
// the end, only when they changed; the lock repair comes first (the
// applied change it records feeds the rest), then the applied change,
// the history, the rollback records and decision (rollback.go), and the
// clean-ups that delete objects last (gc.go). A rollback decision is
// asked of the syncer (an annotation) only after the status holding it is
// stored.
func (r *ReleaseReconciler) pass(ctx context.Context, rel *sluicev1.Release) reconcile.Result {
	if !rel.DeletionTimestamp.IsZero() {
		return reconcile.RunSteps(ctx, rel, r.deleteSteps())
	}
	if res := r.addFinalizer(ctx, rel); res.Ends() {
		return res
	}
	s := &releaseScope{
		rel:     rel,
		patch:   reconcile.NewHelper(r.Client, rel, FieldOwner),
		summary: reconcile.Summary{Conditions: &rel.Status.Conditions, ObservedGeneration: &rel.Status.ObservedGeneration, Generation: rel.Generation, MaxMessage: maxMessage},
	}
	res := reconcile.RunSteps(ctx, s, []reconcile.Step[*releaseScope]{
		{Name: "changes", Run: r.loadChanges},
		{Name: "lock", Run: r.reconcileLock},
		{Name: "applied", Run: r.reconcileApplied},
		{Name: "workload", Run: r.reconcileWorkload},
		{Name: "history", Run: r.reconcileHistory},
		{Name: "rollback", Run: r.reconcileRollback},
		{Name: "retention", Run: r.reconcileRetention},
		{Name: "approvals", Run: r.reconcileApprovalGC},
	})
	if !res.Is(reconcile.KindFailure) {
		// Summarised once, at the end of a successful pass.
		s.summarize()
		if s.after > 0 {
			res = reconcile.Requeue(s.after)
		}
	}
	_, err := s.patch.Patch(ctx, rel)
	if err == nil {
		for _, fn := range s.afterWrite {
			fn()
		}
		// The rollback decision is stored; only now is it asked of
		// the syncer.
		err = r.requestRollback(ctx, rel)
	}
	return reconcile.Settle(ctx, r.APIReader, rel, res, err)
}

// addFinalizer adds the Release's finalizer (the applier's cleanup runs
// before it goes) when it is missing.
func (r *ReleaseReconciler) addFinalizer(ctx context.Context, rel *sluicev1.Release) reconcile.Result {
	if controllerutil.ContainsFinalizer(rel, sluicev1.ReleaseFinalizer) {
		return reconcile.Next()
	}
	orig := rel.DeepCopy()
	controllerutil.AddFinalizer(rel, sluicev1.ReleaseFinalizer)
	if err := r.Client.Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
		return reconcile.Failure(fmt.Errorf("add finalizer to Release %s: %w", rel.Name, err))
	}
	return reconcile.Next()
}

// loadChanges lists the release's ChangeRequests from the cache, newest
// first.
func (r *ReleaseReconciler) loadChanges(ctx context.Context, s *releaseScope) reconcile.Result {
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.rel.Namespace), client.MatchingFields{IndexRelease: s.rel.Name}); err != nil {
		return reconcile.Failure(fmt.Errorf("list ChangeRequests of Release %s: %w", s.rel.Name, err))
	}
	s.changes = list.Items
	slices.SortFunc(s.changes, newestFirst)
	s.all = s.changes
	return reconcile.Next()
}

// newestFirst orders changes newest first: creation time, then attempt,
// then name (so the order is total and stable).
func newestFirst(a, b sluicev1.ChangeRequest) int {
	if c := b.CreationTimestamp.Compare(a.CreationTimestamp.Time); c != 0 {
		return c
	}
	if a.Spec.Attempt != b.Spec.Attempt {
		return int(b.Spec.Attempt - a.Spec.Attempt)
	}
	return strings.Compare(b.Name, a.Name)
}

// finishedAt is when a terminal change reached its phase.
func finishedAt(cr *sluicev1.ChangeRequest) *metav1.Time {
	if cr.Status.Apply != nil && cr.Status.Apply.FinishedAt != nil {
		return cr.Status.Apply.FinishedAt
	}
	if c := meta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionReady); c != nil {
		t := c.LastTransitionTime
		return &t
	}
	return nil
}

// reconcileApplied records the newest applied change when the status does
// not name it yet (the ChangeRequest reconciler normally records it with
// the lock; this repairs a crash between the two writes).
func (r *ReleaseReconciler) reconcileApplied(_ context.Context, s *releaseScope) reconcile.Result {
	var newest *sluicev1.ChangeRequest
	for i := range s.changes {
		cr := &s.changes[i]
		if !cr.Status.Phase.WasApplied() {
			continue
		}
		if newest == nil || finishedAt(cr).After(finishedAt(newest).Time) {
			newest = cr
		}
	}
	if newest == nil || newest.Name == s.rel.Status.AppliedChange {
		return reconcile.Next()
	}
	if current := s.rel.Status.AppliedChange; current != "" {
		for i := range s.changes {
			if s.changes[i].Name == current && !finishedAt(newest).After(finishedAt(&s.changes[i]).Time) {
				return reconcile.Next()
			}
		}
		if !slices.ContainsFunc(s.changes, func(c sluicev1.ChangeRequest) bool { return c.Name == current }) {
			// The recorded change is gone; only a change newer than
			// its history entry replaces it.
			for _, h := range s.rel.Status.History {
				if h.ChangeRequest == current && h.FinishedAt != nil && !finishedAt(newest).After(h.FinishedAt.Time) {
					return reconcile.Next()
				}
			}
		}
	}
	recordApplied(s.rel, newest)
	return reconcile.Next()
}

// reconcileHistory merges the terminal changes into the history, newest
// first, keeping MaxHistory entries (entries of deleted changes stay).
func (r *ReleaseReconciler) reconcileHistory(_ context.Context, s *releaseScope) reconcile.Result {
	byName := map[string]sluicev1.ReleaseHistoryEntry{}
	for _, h := range s.rel.Status.History {
		byName[h.ChangeRequest] = h
	}
	for i := range s.changes {
		cr := &s.changes[i]
		if !cr.Status.Phase.IsTerminal() || isPreview(cr) {
			continue
		}
		byName[cr.Name] = sluicev1.ReleaseHistoryEntry{
			ChangeRequest:  cr.Name,
			Revision:       cr.Spec.Revision,
			Phase:          cr.Status.Phase,
			ApprovalDigest: cr.Spec.ApprovalDigest,
			FinishedAt:     finishedAt(cr),
		}
	}
	history := make([]sluicev1.ReleaseHistoryEntry, 0, len(byName))
	for _, h := range byName {
		history = append(history, h)
	}
	slices.SortFunc(history, func(a, b sluicev1.ReleaseHistoryEntry) int {
		var ta, tb time.Time
		if a.FinishedAt != nil {
			ta = a.FinishedAt.Time
		}
		if b.FinishedAt != nil {
			tb = b.FinishedAt.Time
		}
		if c := tb.Compare(ta); c != 0 {
			return c
		}
		return strings.Compare(b.ChangeRequest, a.ChangeRequest)
	})
	if len(history) > MaxHistory {
		history = history[:MaxHistory]
	}
	if len(history) == 0 {
		history = nil
	}
	s.rel.Status.History = history
	return reconcile.Next()
}

// summarize sets Ready, Progressing and Degraded from the lock, the
// newest non-preview change and the workload's pods, and
// observedGeneration, once, at the end of a pass without error.
func (s *releaseScope) summarize() {
	newest := newestNonPreview(s.all)
	summarizeProgressing(s.summary, s.rel, newest)

	// Degraded: the newest change that ended for its own sake failed.
	var lastEnded *sluicev1.ChangeRequest
	for i := range s.all {
		cr := &s.all[i]
		if isPreview(cr) || !cr.Status.Phase.IsTerminal() || cr.Status.Phase == sluicev1.PhaseSuperseded {
			continue
		}
		lastEnded = cr
		break
	}
	if lastEnded != nil && lastEnded.Status.Phase != sluicev1.PhaseFailed {
		lastEnded = nil
	}
	// ... or a pod of the applied workload is stuck (health.go).
	s.setDegraded(lastEnded)

	summarizeReady(s.summary, s.rel, newest)
	s.summary.Observe()
}

// newestNonPreview is the first change of changes (newest first) that is
// not a preview, or nil.
func newestNonPreview(changes []sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	for i := range changes {
		if !isPreview(&changes[i]) {
			return &changes[i]
		}
	}
	return nil
}

// summarizeProgressing sets Progressing: a change holds the lock or waits
// at the gate. Only rel's lock and newest (its newest non-preview change,
// nil when none) decide it, so the change that takes the lock writes the
// same summary in its lock write (summarizeTakenLock).
func summarizeProgressing(sum reconcile.Summary, rel *sluicev1.Release, newest *sluicev1.ChangeRequest) {
	switch {
	case rel.Status.CurrentChange != "":
		sum.Set(sluicev1.ConditionProgressing, metav1.ConditionTrue, sluicev1.ReasonApplying, fmt.Sprintf("%s holds the apply lock", rel.Status.CurrentChange))
	case newest != nil && !newest.Status.Phase.IsTerminal():
		sum.Set(sluicev1.ConditionProgressing, metav1.ConditionTrue, changeReason(newest), fmt.Sprintf("%s is %s", newest.Name, phaseOf(newest)))
	default:
		sum.Set(sluicev1.ConditionProgressing, metav1.ConditionFalse, sluicev1.ReasonSucceeded, "no change in flight")
	}
}

// summarizeReady sets Ready: the newest change is applied. Like
// Progressing, only rel's lock and newest decide it.
func summarizeReady(sum reconcile.Summary, rel *sluicev1.Release, newest *sluicev1.ChangeRequest) {
	switch {
	case newest == nil:
		sum.Set(sluicev1.ConditionReady, metav1.ConditionFalse, sluicev1.ReasonProgressing, "no change yet")
	case newest.Status.Phase == sluicev1.PhaseApplied || newest.Status.Phase == sluicev1.PhaseVerified:
		sum.Set(sluicev1.ConditionReady, metav1.ConditionTrue, sluicev1.ReasonSucceeded, fmt.Sprintf("%s applied revision %s", newest.Name, newest.Spec.Revision))
	case newest.Name == rel.Status.CurrentChange && !newest.Status.Phase.IsTerminal():
		// One summary for the whole hold: the holder's own steps
		// (Approved, then Applying) are on the ChangeRequest, and a
		// summary per step would be a Release write per step whenever
		// an apply outlasts SummaryDelay.
		sum.Set(sluicev1.ConditionReady, metav1.ConditionFalse, sluicev1.ReasonApplying, fmt.Sprintf("the newest change %s holds the apply lock", newest.Name))
	default:
		sum.Set(sluicev1.ConditionReady, metav1.ConditionFalse, changeReason(newest), fmt.Sprintf("the newest change %s is %s", newest.Name, phaseOf(newest)))
	}
}

func phaseOf(cr *sluicev1.ChangeRequest) sluicev1.ChangeRequestPhase {
	if cr.Status.Phase == "" {
		return sluicev1.PhasePending
	}
	return cr.Status.Phase
}

// changeReason is the reason of a change's Ready condition, or Progressing.
func changeReason(cr *sluicev1.ChangeRequest) string {
	if c := meta.FindStatusCondition(cr.Status.Conditions, sluicev1.ConditionReady); c != nil {
		return c.Reason
	}
	return sluicev1.ReasonProgressing
}
