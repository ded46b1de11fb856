package controller

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/podhealth"
	rreconcile "github.com/sluice-gitops/sluice/runtime/reconcile"
)

// The workload's health on the Release: the Release reconciler watches
// the pods of released workloads and keeps the first stuck one as its
// Degraded condition (reason ImagePullFailed, CrashLooping, OOMKilled,
// Unschedulable, CreateContainerConfigError or PodFailed, with the pod,
// container, image and the kubelet's message), so it outlives Events and
// is there as soon as the pod's status says so, not after a progress
// deadline.
//
// What is cached: one informer on Pods, cluster-wide (target namespaces
// are not the control namespaces the operator may be restricted to) but
// selected by the label podhealth.InstanceLabel (Helm's instance label,
// which verification reads too; the Helm applier adds no label of
// Sluice's own to a chart's pods), and each pod slimmed by
// podhealth.Slim to its name, owners, images, phase, conditions and
// container states: no env, volumes, annotations or managed fields. It
// costs about 1-2 KiB per labelled pod in the cluster (pods of Helm
// releases Sluice did not make included: a label selector cannot name
// the target namespaces, which change with every Release).
//
// The compliance scanner (internal/compliance, when enabled) keeps pods
// too, on purpose in informers of its own: it reads specs, not status, of
// every pod in a target namespace, and keeps only the identity of a pod
// a controller owns. Serving both from one cache would keep full pods
// cluster-wide; a released pod costs one slim status copy here and a
// name-and-owner copy there.

// IndexReleaseTarget indexes Releases by "<target namespace>/<name>", for
// the target namespace they applied to and the one they will apply to:
// a pod maps to its Release by its namespace and instance label.
const IndexReleaseTarget = "releaseTarget"

// releaseTargets are the index values of a Release.
func releaseTargets(o client.Object) []string {
	rel, ok := o.(*sluicev1.Release)
	if !ok {
		return nil
	}
	var out []string
	for _, ns := range []string{rel.Status.AppliedTargetNamespace, rel.Spec.TargetNamespace} {
		if ns != "" && (len(out) == 0 || out[0] != ns+"/"+rel.Name) {
			out = append(out, ns+"/"+rel.Name)
		}
	}
	return out
}

// PodCache is the cache configuration of the pods the operator watches:
// every namespace, label-selected, slimmed (see above).
func PodCache() cache.ByObject {
	req, err := labels.NewRequirement(podhealth.InstanceLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label: cannot fail
	}
	return cache.ByObject{
		Namespaces: map[string]cache.Config{cache.AllNamespaces: {}},
		Label:      labels.NewSelector().Add(*req),
		Transform:  podhealth.Slim,
	}
}

// podHealthChanged passes pod creations and deletions, and the updates
// that change what is stuck in it (podhealth.Key): a restart count or a
// back-off message moving on does not wake the Release.
func podHealthChanged() predicate.Predicate {
	return podEvents(func(o, n *corev1.Pod) bool { return podhealth.Key(o) != podhealth.Key(n) })
}

// podEvents passes the creations and deletions of pods with an instance
// label, and their updates for which changed holds.
func podEvents(changed func(old, new *corev1.Pod) bool) predicate.Predicate {
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return hasInstance(e.Object) },
		DeleteFunc: func(e event.DeleteEvent) bool { return hasInstance(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			o, ok1 := e.ObjectOld.(*corev1.Pod)
			n, ok2 := e.ObjectNew.(*corev1.Pod)
			return ok1 && ok2 && hasInstance(n) && changed(o, n)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

func hasInstance(o client.Object) bool {
	return o != nil && o.GetLabels()[podhealth.InstanceLabel] != ""
}

// releasesOfPod maps a pod to the Releases (in any control namespace the
// operator watches) named by its instance label that target its
// namespace.
func (r *ReleaseReconciler) releasesOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	rels := podReleases(ctx, r.Client, o)
	out := make([]reconcile.Request, 0, len(rels))
	for i := range rels {
		out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&rels[i])})
	}
	return out
}

// podReleases lists (from the cache, not deep-copied: read only) the
// Releases named by a pod's instance label that target its namespace,
// through the IndexReleaseTarget index; none when the list fails (logged).
func podReleases(ctx context.Context, c client.Reader, o client.Object) []sluicev1.Release {
	var list sluicev1.ReleaseList
	key := o.GetNamespace() + "/" + o.GetLabels()[podhealth.InstanceLabel]
	if err := c.List(ctx, &list, client.MatchingFields{IndexReleaseTarget: key}, client.UnsafeDisableDeepCopy); err != nil {
		log.FromContext(ctx).Error(err, "Listing the Releases of a pod failed", "pod", client.ObjectKeyFromObject(o))
		return nil
	}
	return list.Items
}

// workloadNamespace is where the Release's workload runs: where the
// change holding the lock is being applied (an applier that waits for the
// pods to be ready keeps a change Applying while its pods cannot pull
// their image: that is when it matters most), else where the release was
// last applied; "" when nothing was applied yet.
func workloadNamespace(rel *sluicev1.Release, changes []sluicev1.ChangeRequest) string {
	for i := range changes {
		cr := &changes[i]
		if cr.Name == rel.Status.CurrentChange && cr.Status.Phase == sluicev1.PhaseApplying && !cr.IsDelete() {
			return cr.Spec.TargetNamespace
		}
	}
	if rel.Status.AppliedChange == "" {
		return ""
	}
	if rel.Status.AppliedTargetNamespace != "" {
		return rel.Status.AppliedTargetNamespace
	}
	return rel.Spec.TargetNamespace
}

// reconcileWorkload reads the applied release's pods from the cache and
// keeps the first stuck one for the summary (Degraded).
func (r *ReleaseReconciler) reconcileWorkload(ctx context.Context, s *releaseScope) rreconcile.Result {
	s.stuck = nil
	ns := workloadNamespace(s.rel, s.all)
	if ns == "" {
		return rreconcile.Next()
	}
	var pods corev1.PodList
	if err := r.Client.List(ctx, &pods, client.InNamespace(ns), client.MatchingLabels{podhealth.InstanceLabel: s.rel.Name}); err != nil {
		return rreconcile.Failure(fmt.Errorf("list the pods of Release %s in %s: %w", s.rel.Name, ns, err))
	}
	if p, ok := podhealth.First(pods.Items); ok {
		s.stuck = &p
	}
	return rreconcile.Next()
}

// setDegraded sets Degraded from the last change and the workload: a
// failed change first, then a stuck pod, else False. A stuck pod with
// the reason and subject (pod, container, image) already recorded keeps
// the recorded condition when only its message moved on, or when it is
// a pull back-off: the kubelet alternates ErrImagePull (with the
// registry's message, the one worth keeping) and ImagePullBackOff (a
// back-off notice), and each flip would be a write saying nothing new.
func (s *releaseScope) setDegraded(lastFailed *sluicev1.ChangeRequest) {
	set := s.summary.Set
	switch {
	case lastFailed != nil:
		set(sluicev1.ConditionDegraded, metav1.ConditionTrue, changeReason(lastFailed), fmt.Sprintf("%s failed", lastFailed.Name))
	case s.stuck != nil:
		if c := meta.FindStatusCondition(s.rel.Status.Conditions, sluicev1.ConditionDegraded); c != nil &&
			c.Status == metav1.ConditionTrue && c.Reason == s.stuck.Reason && strings.HasPrefix(c.Message, s.stuck.Subject()+": ") &&
			(s.stuck.State == "ImagePullBackOff" || strings.HasPrefix(c.Message, s.stuck.Subject()+": "+s.stuck.State)) {
			return
		}
		set(sluicev1.ConditionDegraded, metav1.ConditionTrue, s.stuck.Reason, s.stuck.String())
	default:
		set(sluicev1.ConditionDegraded, metav1.ConditionFalse, sluicev1.ReasonSucceeded, "the last change did not fail")
	}
}
