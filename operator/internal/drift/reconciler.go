// Package drift is the operator's drift detection: per Release, on the
// interval of its Repository's drift policy, it compares what runs with
// what the last applied ChangeRequest applied (Helm: every object of the
// approved release record, by a server-side dry-run apply; Terraform: a
// plan of the applied configuration, see TerraformChecker; Argo CD: what
// Argo CD reports of the release's Application, see ArgoCDChecker), and reports it in the Release's Drifted condition,
// an Event and the sluice_release_drifted metric. In mode revert it asks
// the syncer for a re-plan of the applied revision, whose ChangeRequest
// carries the applied approvalDigest when it renders the same, so the gate
// lets it through without a new approval (gate.Reapplies). It writes
// nothing when nothing changed.
package drift

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
	rt "github.com/sluice-gitops/sluice/runtime/reconcile"
)

// FieldOwner is the field manager of the drift controller's writes.
const FieldOwner = "sluice-drift"

// RevertPrefix starts the re-plan value the drift controller sets on a
// Release to have its applied revision applied again.
const RevertPrefix = sluicev1.DriftRevertPrefix

// Checker compares one release's live state with its applied change.
type Checker interface {
	Check(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, applied *sluicev1.ChangeRequest) (Report, error)
}

// Reconciler checks Releases for drift.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// Helm checks releases delivered by helm; nil skips them.
	Helm Checker
	// Terraform checks releases with a Terraform stack; nil skips them.
	Terraform Checker
	// ArgoCD checks releases delivered by argocd; nil skips them.
	ArgoCD  *ArgoCDChecker
	Metrics *metrics.DriftRecorder
	// Now is the clock; time.Now when nil.
	Now func() time.Time
}

// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases/status,verbs=get;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=repositories;changerequests,verbs=get;list;watch

// SetupWithManager registers the controller ("release-drift"); a change of
// a Repository's drift policy wakes its Releases.
func (r *Reconciler) SetupWithManager(mgr manager.Manager, opts controller.Options) error {
	return builder.ControllerManagedBy(mgr).
		Named("release-drift").
		For(&sluicev1.Release{}, builder.WithPredicates(appliedChanged())).
		Watches(&sluicev1.Repository{}, handler.EnqueueRequestsFromMapFunc(r.releasesOf)).
		WithOptions(opts).
		Complete(r)
}

// appliedChanged lets through the Release updates that change what a check
// compares with or whether it may run (the applied change, the apply lock,
// the spec); its own status writes and the other controllers' do not wake
// it, the interval does.
func appliedChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*sluicev1.Release)
			n, ok2 := e.ObjectNew.(*sluicev1.Release)
			if !ok1 || !ok2 {
				return true
			}
			return o.Generation != n.Generation || o.Status.AppliedChange != n.Status.AppliedChange ||
				o.Status.CurrentChange != n.Status.CurrentChange || !n.DeletionTimestamp.IsZero()
		},
	}
}

func (r *Reconciler) releasesOf(ctx context.Context, o client.Object) []reconcile.Request {
	var list sluicev1.ReleaseList
	if err := r.Client.List(ctx, &list, client.InNamespace(o.GetNamespace())); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		if list.Items[i].Spec.Repository == o.GetName() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])})
		}
	}
	return out
}

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// driftScope is the state of one drift check of one Release.
type driftScope struct {
	rel     *sluicev1.Release
	repo    *sluicev1.Repository
	applied *sluicev1.ChangeRequest
	// every is the interval of the Repository's drift policy.
	every time.Duration
	// report: the pass decided what the drift status says: cond is the
	// Drifted condition (nil removes it), drift the summary.
	report bool
	cond   *metav1.Condition
	drift  *sluicev1.DriftStatus
}

// say records what the drift status says; it is written once, at the end
// of the pass.
func (s *driftScope) say(cond *metav1.Condition, drift *sluicev1.DriftStatus) {
	s.report, s.cond, s.drift = true, cond, drift
}

// Reconcile checks one Release, when its Repository's drift policy is on,
// and comes back after the policy's interval: the steps in order, then
// one status write, only when the drift status changed.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rel := &sluicev1.Release{}
	if err := r.Client.Get(ctx, req.NamespacedName, rel); err != nil {
		if apierrors.IsNotFound(err) {
			r.Metrics.Forget(req.Namespace, req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !rel.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	s := &driftScope{rel: rel}
	res := rt.RunSteps(ctx, s, []rt.Step[*driftScope]{
		{Name: "repository", Run: r.loadRepository},
		{Name: "policy", Run: r.reconcilePolicy},
		{Name: "applied change", Run: r.loadApplied},
		{Name: "check", Run: r.reconcileCheck},
	})
	if s.report {
		if err := r.patchStatus(ctx, rel, s.cond, s.drift); err != nil {
			return rt.Failure(err).Outcome()
		}
	}
	return res.Outcome()
}

// loadRepository loads the release's Repository; without it there is no
// drift policy, and nothing to do.
func (r *Reconciler) loadRepository(ctx context.Context, s *driftScope) rt.Result {
	repo := &sluicev1.Repository{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: s.rel.Namespace, Name: s.rel.Spec.Repository}, repo); err != nil {
		return rt.Failure(client.IgnoreNotFound(err))
	}
	s.repo = repo
	return rt.Next()
}

// reconcilePolicy ends the pass when drift detection is off (clearing
// the drift status) or there is nothing to compare with: nothing applied
// yet, or a change in flight.
func (r *Reconciler) reconcilePolicy(_ context.Context, s *driftScope) rt.Result {
	policy := s.repo.Spec.Drift
	if policy.GetMode() == sluicev1.DriftOff {
		r.Metrics.Forget(s.rel.Namespace, s.rel.Name)
		s.say(nil, nil)
		return rt.Done()
	}
	s.every = policy.GetInterval()
	if s.rel.Status.AppliedChange == "" || s.rel.Status.CurrentChange != "" {
		r.Metrics.Check(s.rel.Namespace, s.rel.Name, metrics.DriftSkipped, 0)
		return rt.Requeue(s.every)
	}
	return rt.Next()
}

// loadApplied loads the release's applied ChangeRequest, what the live
// state is compared with.
func (r *Reconciler) loadApplied(ctx context.Context, s *driftScope) rt.Result {
	rel := s.rel
	applied := &sluicev1.ChangeRequest{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Status.AppliedChange}, applied); err != nil {
		if !apierrors.IsNotFound(err) {
			return rt.Failure(fmt.Errorf("get the applied ChangeRequest %s: %w", rel.Status.AppliedChange, err))
		}
		cond := condition(rel, metav1.ConditionUnknown, sluicev1.ReasonDriftCheckFailed, fmt.Sprintf("the applied ChangeRequest %s is gone, so there is nothing to compare with", rel.Status.AppliedChange))
		s.say(&cond, rel.Status.Drift)
		return rt.Requeue(s.every)
	}
	s.applied = applied
	return rt.Next()
}

// reconcileCheck compares the live state with the applied change and
// reports it: a failed check (Unknown), no drift (False, with an Event
// when it drifted before), or drift (True, an Event when the drifted
// objects changed, and in mode revert a re-plan of the applied
// revision).
func (r *Reconciler) reconcileCheck(ctx context.Context, s *driftScope) rt.Result {
	rel, applied := s.rel, s.applied
	start := r.now()
	rep, noRevert, err := r.check(ctx, rel, s.repo, applied)
	took := r.now().Sub(start)
	if err != nil {
		r.Metrics.Check(rel.Namespace, rel.Name, metrics.DriftError, took)
		log.FromContext(ctx).Info("Drift check failed", "error", err.Error())
		cond := condition(rel, metav1.ConditionUnknown, sluicev1.ReasonDriftCheckFailed, "the drift check failed: "+err.Error())
		s.say(&cond, rel.Status.Drift)
		return rt.Requeue(s.every)
	}
	if !rep.Drifted() {
		r.Metrics.Check(rel.Namespace, rel.Name, metrics.DriftClean, took)
		cond := condition(rel, metav1.ConditionFalse, sluicev1.ReasonNoDrift, fmt.Sprintf("the %d objects of %s match the live state", rep.Checked, applied.Name))
		if was := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted); was != nil && was.Status == metav1.ConditionTrue && r.Recorder != nil {
			r.Recorder.Eventf(rel, applied, "Normal", sluicev1.ReasonNoDrift, "DriftCheck", "the live state matches %s again", applied.Name)
		}
		s.say(&cond, nil)
		return rt.Requeue(s.every)
	}
	r.Metrics.Check(rel.Namespace, rel.Name, metrics.DriftFound, took)

	st := &sluicev1.DriftStatus{Change: applied.Name, Objects: rep.Objects}
	if n := len(st.Objects); n > sluicev1.MaxDriftedObjects {
		st.Objects, st.Truncated = st.Objects[:sluicev1.MaxDriftedObjects], int32(n-sluicev1.MaxDriftedObjects)
	}
	summary := Summary(applied.Name, rep.Objects)
	reason := sluicev1.ReasonDriftDetected
	mode := s.repo.Spec.Drift.GetMode()
	if mode == sluicev1.DriftRevert && noRevert != "" {
		summary += "; not reverted: " + noRevert
	} else if mode == sluicev1.DriftRevert {
		var why string
		reason, why, err = r.requestRevert(ctx, rel, applied, st)
		if err != nil {
			return rt.Failure(err)
		}
		summary += "; " + why
	}
	cond := condition(rel, metav1.ConditionTrue, reason, summary)
	if was := rel.Status.Drift; r.Recorder != nil && (was == nil || !equality.Semantic.DeepEqual(was.Objects, st.Objects)) {
		r.Recorder.Eventf(rel, applied, "Warning", reason, "DriftCheck", "%s", text.Truncate(summary, maxMessage))
	}
	s.say(&cond, st)
	return rt.Requeue(s.every)
}

// check runs the checkers that apply to the release and merges their
// reports; noRevert says why re-applying the applied change would not
// undo the drift (Argo CD), so no revert is asked for.
func (r *Reconciler) check(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, applied *sluicev1.ChangeRequest) (all Report, noRevert string, err error) {
	// What to check comes from the applied change, never the Release's
	// spec, which a later push may have rewritten.
	if applied.StackOf() != nil && r.Terraform != nil && applied.Spec.PlanDigest != "" {
		rep, err := r.Terraform.Check(ctx, rel, repo, applied)
		if err != nil {
			return Report{}, "", fmt.Errorf("terraform: %w", err)
		}
		all.Objects, all.Checked = append(all.Objects, rep.Objects...), all.Checked+rep.Checked
	}
	if applied.Spec.Delivery == sluicev1.DeliveryHelm && r.Helm != nil && applied.Spec.ManifestDigest != "" {
		rep, err := r.Helm.Check(ctx, rel, repo, applied)
		if err != nil {
			return Report{}, "", fmt.Errorf("helm: %w", err)
		}
		all.Objects, all.Checked = append(all.Objects, rep.Objects...), all.Checked+rep.Checked
	}
	if applied.Spec.Delivery == sluicev1.DeliveryArgoCD && r.ArgoCD != nil && applied.Spec.ManifestDigest != "" {
		rep, why, err := r.ArgoCD.check(ctx, rel, repo, applied)
		if err != nil {
			return Report{}, "", fmt.Errorf("argocd: %w", err)
		}
		all.Objects, all.Checked, noRevert = append(all.Objects, rep.Objects...), all.Checked+rep.Checked, why
	}
	return all, noRevert, nil
}

// requestRevert asks the syncer for a re-plan of the applied revision by
// setting the Release's re-plan annotation, once per applied change. It
// does so only while the syncer's newest commit for the release is the
// applied revision: a re-plan is made at that commit, and a newer one
// would be a new change, not a revert.
func (r *Reconciler) requestRevert(ctx context.Context, rel *sluicev1.Release, applied *sluicev1.ChangeRequest, st *sluicev1.DriftStatus) (string, string, error) {
	if rel.Status.LastSyncedCommit != "" && rel.Status.LastSyncedCommit != applied.Spec.Revision {
		return sluicev1.ReasonDriftDetected, fmt.Sprintf("not reverted: the newest commit %s is not the applied revision %s, so a re-plan would be a new change", sluicev1.ShortSHA(rel.Status.LastSyncedCommit), sluicev1.ShortSHA(applied.Spec.Revision)), nil
	}
	value := RevertPrefix + applied.Name
	st.RevertRequested = value
	if rel.Annotations[sluicev1.AnnotationReplan] != value {
		orig := rel.DeepCopy()
		if rel.Annotations == nil {
			rel.Annotations = map[string]string{}
		}
		rel.Annotations[sluicev1.AnnotationReplan] = value
		if err := r.Client.Patch(ctx, rel, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(FieldOwner)); err != nil {
			return "", "", fmt.Errorf("ask for a re-plan of Release %s: %w", rel.Name, err)
		}
	}
	return sluicev1.ReasonDriftReverting, fmt.Sprintf("asked for a re-plan of revision %s (%s=%s); with the same approvalDigest it re-applies without a new approval", sluicev1.ShortSHA(applied.Spec.Revision), sluicev1.AnnotationReplan, value), nil
}

// patchStatus sets the Drifted condition (nil removes it) and the drift
// summary, and writes only when they changed. The snapshot is taken here,
// after a re-plan request patched the Release's metadata, so the write
// carries the resourceVersion that request returned.
func (r *Reconciler) patchStatus(ctx context.Context, rel *sluicev1.Release, cond *metav1.Condition, st *sluicev1.DriftStatus) error {
	patch := rt.NewHelper(r.Client, rel, FieldOwner)
	if cond == nil {
		meta.RemoveStatusCondition(&rel.Status.Conditions, sluicev1.ConditionDrifted)
	} else {
		cond.LastTransitionTime = metav1.NewTime(r.now())
		meta.SetStatusCondition(&rel.Status.Conditions, *cond)
	}
	rel.Status.Drift = st
	_, err := patch.Patch(ctx, rel)
	return err
}

func condition(rel *sluicev1.Release, status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: sluicev1.ConditionDrifted, Status: status, Reason: reason, Message: text.Truncate(msg, maxMessage), ObservedGeneration: rel.Generation}
}

// Summary is a one-line account of the drifted objects.
func Summary(change string, objs []sluicev1.DriftedObject) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d object(s) differ from %s:", len(objs), change)
	for i, o := range objs {
		if i == 5 {
			fmt.Fprintf(&b, " and %d more", len(objs)-5)
			break
		}
		if i > 0 {
			b.WriteString(";")
		}
		fmt.Fprintf(&b, " %s %s %s", o.Kind, o.Name, o.Change)
		if len(o.Fields) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(o.Fields, ", "))
		}
	}
	return b.String()
}

// maxMessage bounds the Drifted condition's message and the drift Event,
// "…" included.
const maxMessage = 1024 - len("…")
