package controller

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// What wakes each reconciler: the watches, the predicates that filter
// their events, and the functions that map an event to the objects to
// reconcile.

// SetupWithManager watches ChangeRequests, and maps Approvals (by digest),
// Releases, ApprovalPolicies, target Namespaces (labels) and Persons to
// the changes they decide, and the readiness of a release's pods to its
// change in Applying (an applier waiting for readiness looks again at
// once). The pods come from the Release reconciler's informer (one cache,
// label-selected and slimmed: health.go), not an informer of their own.
func (r *ChangeRequestReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("changerequest").
		For(&sluicev1.ChangeRequest{}, builder.WithPredicates(changeRequestChanged())).
		Watches(&sluicev1.ChangeRequest{}, handler.EnqueueRequestsFromMapFunc(r.olderChangesOfRelease), builder.WithPredicates(createdOnly())).
		Watches(&sluicev1.Approval{}, handler.EnqueueRequestsFromMapFunc(r.changesForApproval), builder.WithPredicates(approvalCreatedOrDeleted())).
		Watches(&sluicev1.Release{}, handler.EnqueueRequestsFromMapFunc(r.changesForRelease), builder.WithPredicates(releaseGateInputsChanged())).
		Watches(&sluicev1.Release{}, handler.EnqueueRequestsFromMapFunc(lockHolder), builder.WithPredicates(releaseLockMoved())).
		Watches(&sluicev1.ApprovalPolicy{}, handler.EnqueueRequestsFromMapFunc(r.changesForPolicy)).
		// Namespaces as metadata only: their labels are all the gate reads.
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.changesForNamespace), builder.OnlyMetadata, builder.WithPredicates(namespaceLabelsChanged())).
		Watches(&sluicev1.Person{}, handler.EnqueueRequestsFromMapFunc(r.changesForPerson)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.applyingChangeOfPod), builder.WithPredicates(podReadinessChanged())).
		WithOptions(opts).
		Complete(r)
}

// SetupWithManager watches Releases, the phase changes of their
// ChangeRequests, new Approvals and the health of their pods (health.go).
func (r *ReleaseReconciler) SetupWithManager(mgr ctrl.Manager, opts controller.Options) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("release").
		For(&sluicev1.Release{}, builder.WithPredicates(releaseChanged())).
		Watches(&sluicev1.Release{}, summarizeLater(self, lockFreed), builder.WithPredicates(releaseLockChanged())).
		Watches(&sluicev1.ChangeRequest{}, summarizeLater(releaseOf, r.lockMayMove), builder.WithPredicates(changePhaseChanged())).
		Watches(&sluicev1.Approval{}, handler.EnqueueRequestsFromMapFunc(releaseOf), builder.WithPredicates(createdOnly())).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(r.releasesOfPod), builder.WithPredicates(podHealthChanged())).
		WithOptions(opts).
		Complete(r)
}

// changeRequestChanged passes creations and the updates that can change a
// ChangeRequest's outcome: a new phase (never hidden), a new generation, or
// the start of a deletion. Status writes that only touch conditions or
// counts are skipped.
func changeRequestChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*sluicev1.ChangeRequest)
			n, ok2 := e.ObjectNew.(*sluicev1.ChangeRequest)
			if !ok1 || !ok2 {
				return true
			}
			return o.Status.Phase != n.Status.Phase ||
				o.Generation != n.Generation ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero()
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// updates passes the updates of a T for which changed holds and, when
// deletes is set, its deletion; never creations or generic events.
func updates[T client.Object](deletes bool, changed func(old, new T) bool) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return false },
		DeleteFunc: func(event.DeleteEvent) bool { return deletes },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(T)
			n, ok2 := e.ObjectNew.(T)
			return ok1 && ok2 && changed(o, n)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// createdOnly passes creations only.
func createdOnly() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// approvalCreatedOrDeleted passes new Approvals (never hidden) and deleted
// ones; an Approval's spec is immutable, so updates (metadata) are skipped.
func approvalCreatedOrDeleted() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return true },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// releaseGateInputsChanged passes Release events that can change the
// decision on its changes: creation and deletion, labels (policies select
// by them), environment, target namespace, the applied rule and namespace
// the latest change, and the rollback records the gate reads (decision,
// last verified change, quarantine). The syncer's lastSyncedTree and the conditions
// are skipped; the apply lock moving wakes only its new holder
// (releaseLockMoved, lockHolder).
func releaseGateInputsChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*sluicev1.Release)
			n, ok2 := e.ObjectNew.(*sluicev1.Release)
			if !ok1 || !ok2 {
				return true
			}
			return !equality.Semantic.DeepEqual(o.Labels, n.Labels) ||
				o.Spec.Environment != n.Spec.Environment ||
				o.Spec.TargetNamespace != n.Spec.TargetNamespace ||
				o.Status.AppliedTargetNamespace != n.Status.AppliedTargetNamespace ||
				o.Status.LatestChange != n.Status.LatestChange ||
				!equality.Semantic.DeepEqual(o.Status.AppliedRule, n.Status.AppliedRule) ||
				!equality.Semantic.DeepEqual(o.Status.Rollback, n.Status.Rollback) ||
				!equality.Semantic.DeepEqual(o.Status.LastVerified, n.Status.LastVerified) ||
				!equality.Semantic.DeepEqual(o.Status.Quarantine, n.Status.Quarantine)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// releaseLockMoved passes Release updates that move the apply lock
// (status.currentChange).
func releaseLockMoved() predicate.Predicate {
	return updates(false, func(o, n *sluicev1.Release) bool { return o.Status.CurrentChange != n.Status.CurrentChange })
}

// lockHolder maps a Release whose apply lock moved to the change that
// holds it now: the one change that may go on. The changes waiting in line
// are not woken; the lock comes to them.
func lockHolder(_ context.Context, o client.Object) []reconcile.Request {
	rel, ok := o.(*sluicev1.Release)
	if !ok || rel.Status.CurrentChange == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: rel.Namespace, Name: rel.Status.CurrentChange}}}
}

// changesForApproval maps an Approval to the ChangeRequests with its
// approvalDigest, through the field index.
func (r *ChangeRequestReconciler) changesForApproval(ctx context.Context, o client.Object) []reconcile.Request {
	a, ok := o.(*sluicev1.Approval)
	if !ok {
		return nil
	}
	return r.openChanges(ctx, a.Namespace, client.MatchingFields{IndexApprovalDigest: string(a.Spec.ApprovalDigest)}, "")
}

// changesForRelease maps a Release to its open ChangeRequests and to the
// holder of its apply lock (which may be terminal and due to hand it back).
func (r *ChangeRequestReconciler) changesForRelease(ctx context.Context, o client.Object) []reconcile.Request {
	rel, ok := o.(*sluicev1.Release)
	if !ok {
		return nil
	}
	return r.openChanges(ctx, rel.Namespace, client.MatchingFields{IndexRelease: rel.Name}, rel.Status.CurrentChange)
}

// changesForPolicy maps an ApprovalPolicy to every open ChangeRequest of
// its namespace.
func (r *ChangeRequestReconciler) changesForPolicy(ctx context.Context, o client.Object) []reconcile.Request {
	return r.openChanges(ctx, o.GetNamespace(), nil, "")
}

// olderChangesOfRelease maps a new ChangeRequest to the other open changes
// of its release, which it may supersede.
func (r *ChangeRequestReconciler) olderChangesOfRelease(ctx context.Context, o client.Object) []reconcile.Request {
	cr, ok := o.(*sluicev1.ChangeRequest)
	if !ok || isPreview(cr) {
		return nil
	}
	reqs := r.openChanges(ctx, cr.Namespace, client.MatchingFields{IndexRelease: cr.Spec.Release}, "")
	out := reqs[:0]
	for _, req := range reqs {
		if req.Name != cr.Name {
			out = append(out, req)
		}
	}
	return out
}

// openChanges lists the non-terminal ChangeRequests matching fields in a
// namespace, plus the named extra one.
func (r *ChangeRequestReconciler) openChanges(ctx context.Context, namespace string, fields client.MatchingFields, extra string) []reconcile.Request {
	var list sluicev1.ChangeRequestList
	opts := []client.ListOption{client.InNamespace(namespace), client.UnsafeDisableDeepCopy}
	if fields != nil {
		opts = append(opts, fields)
	}
	if err := r.Client.List(ctx, &list, opts...); err != nil {
		log.FromContext(ctx).Error(err, "Listing ChangeRequests to wake failed", "namespace", namespace)
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		cr := &list.Items[i]
		if !cr.Status.Phase.IsTerminal() || cr.Name == extra {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
		}
	}
	return out
}

// namespaceLabelsChanged passes Namespace creations, deletions and label
// changes: ApprovalPolicies select target namespaces by their labels.
func namespaceLabelsChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return !equality.Semantic.DeepEqual(e.ObjectOld.GetLabels(), e.ObjectNew.GetLabels())
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// changesForNamespace maps a target Namespace to the open ChangeRequests
// that deploy to it, in every control namespace the operator watches.
func (r *ChangeRequestReconciler) changesForNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing ChangeRequests to wake failed", "targetNamespace", o.GetName())
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		cr := &list.Items[i]
		if cr.Spec.TargetNamespace == o.GetName() && !cr.Status.Phase.IsTerminal() {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(cr)})
		}
	}
	return out
}

// changesForPerson maps a Person (who is who, for author exclusion and
// counting) to every open ChangeRequest the operator watches.
func (r *ChangeRequestReconciler) changesForPerson(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.openChanges(ctx, "", nil, "")
}

// releaseOf maps a ChangeRequest or an Approval to its Release.
func releaseOf(_ context.Context, o client.Object) []reconcile.Request {
	var name string
	switch x := o.(type) {
	case *sluicev1.ChangeRequest:
		name = x.Spec.Release
	case *sluicev1.Approval:
		name = x.Spec.Release
	}
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
}

// SummaryDelay is how long the Release reconciler lets the phase changes
// of a release's ChangeRequests and its lock hand-overs gather before it
// summarises them: a burst of changes is one status write, not one each.
// Events that may move the apply lock (see lockMayMove and lockFreed) are
// not delayed: the lock is handed on at once, and the summary is written
// in the same write.
const SummaryDelay = time.Second

// summarizeLater enqueues the Releases fn maps an object to: at once when
// urgent says the event may move the apply lock, else after SummaryDelay.
// The queue keeps one entry per Release, at the earliest time asked for.
func summarizeLater(fn handler.MapFunc, urgent func(ctx context.Context, o client.Object, deleted bool) bool) handler.EventHandler {
	add := func(ctx context.Context, o client.Object, deleted bool, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		if o == nil {
			return
		}
		now := urgent(ctx, o, deleted)
		for _, req := range fn(ctx, o) {
			if now {
				q.Add(req)
			} else {
				q.AddAfter(req, SummaryDelay)
			}
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, false, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.ObjectNew, false, q)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			add(ctx, e.Object, true, q)
		},
	}
}

// lockMayMove reports whether a ChangeRequest event may let its release's
// apply lock move, per the cached Release: the change was approved while
// the lock is free, or the holder ended or was deleted. Other phase
// changes (and these, should the cache be behind) are summarised after
// SummaryDelay, which hands the lock on too.
func (r *ReleaseReconciler) lockMayMove(ctx context.Context, o client.Object, deleted bool) bool {
	cr, ok := o.(*sluicev1.ChangeRequest)
	if !ok {
		return false
	}
	rel := &sluicev1.Release{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: cr.Spec.Release}, rel); err != nil {
		return false
	}
	switch holder := rel.Status.CurrentChange; {
	case holder == "":
		return cr.Status.Phase == sluicev1.PhaseApproved
	case holder == cr.Name:
		return deleted || cr.Status.Phase.IsTerminal()
	}
	return false
}

// lockFreed reports whether a Release's apply lock is free: a change
// waiting in line may take it.
func lockFreed(_ context.Context, o client.Object, _ bool) bool {
	rel, ok := o.(*sluicev1.Release)
	return ok && rel.Status.CurrentChange == ""
}

// self maps a Release to itself.
func self(_ context.Context, o client.Object) []reconcile.Request {
	return []reconcile.Request{{NamespacedName: client.ObjectKeyFromObject(o)}}
}

// releaseLockChanged passes updates of the lock and change fields of a
// Release's status (summarised after SummaryDelay).
func releaseLockChanged() predicate.Predicate {
	return updates(false, func(o, n *sluicev1.Release) bool {
		return o.Status.CurrentChange != n.Status.CurrentChange ||
			o.Status.AppliedChange != n.Status.AppliedChange ||
			o.Status.LatestChange != n.Status.LatestChange
	})
}

// releaseChanged passes what needs the Release reconciler at once:
// creation, a new generation, deletion and finalizers. The lock and change
// fields of its status are summarised a moment later (releaseLockChanged);
// the syncer's lastSyncedTree and condition-only writes are skipped.
func releaseChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return false },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*sluicev1.Release)
			n, ok2 := e.ObjectNew.(*sluicev1.Release)
			if !ok1 || !ok2 {
				return true
			}
			return o.Generation != n.Generation ||
				o.DeletionTimestamp.IsZero() != n.DeletionTimestamp.IsZero() ||
				!slices.Equal(o.Finalizers, n.Finalizers)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// changePhaseChanged passes a ChangeRequest's creation, deletion and every
// phase change (never hidden).
func changePhaseChanged() predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(event.CreateEvent) bool { return true },
		DeleteFunc: func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*sluicev1.ChangeRequest)
			n, ok2 := e.ObjectNew.(*sluicev1.ChangeRequest)
			return !ok1 || !ok2 || o.Status.Phase != n.Status.Phase
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// podReadinessChanged passes pod creations and deletions and the updates
// that change whether a pod is ready: what may make the objects of a
// release ready by kstatus (its workloads' status follows its pods).
func podReadinessChanged() predicate.Predicate {
	return podEvents(func(o, n *corev1.Pod) bool { return podReady(o) != podReady(n) })
}

// podReady is the status of a pod's Ready condition.
func podReady(p *corev1.Pod) corev1.ConditionStatus {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status
		}
	}
	return corev1.ConditionUnknown
}

// applyingChangeOfPod maps a pod to the change in Applying that holds the
// apply lock of a Release it belongs to (its namespace and instance
// label, the IndexReleaseTarget index): the one change that may be
// waiting for it. Pods of releases with no such change wake nothing.
func (r *ChangeRequestReconciler) applyingChangeOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	rels := podReleases(ctx, r.Client, o)
	var out []reconcile.Request
	for i := range rels {
		rel := &rels[i]
		if rel.Status.CurrentChange == "" {
			continue
		}
		holder := client.ObjectKey{Namespace: rel.Namespace, Name: rel.Status.CurrentChange}
		cr := &sluicev1.ChangeRequest{}
		if err := r.Client.Get(ctx, holder, cr); err != nil || cr.Status.Phase != sluicev1.PhaseApplying || cr.Spec.TargetNamespace != o.GetNamespace() {
			continue
		}
		out = append(out, reconcile.Request{NamespacedName: holder})
	}
	return out
}
