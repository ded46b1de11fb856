package verify

import (
	"context"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/podhealth"
)

// InstanceLabel selects the objects of a Helm release: the label the
// Degraded condition and diagnose read too.
const InstanceLabel = podhealth.InstanceLabel

// failsAtOnce are the pod problems a verification does not wait out: a
// container that cannot pull its image, crash-loops, cannot be created
// or was killed for lack of memory. An unschedulable pod is left to the
// progress deadline (a cluster autoscaler may still place it).
var failsAtOnce = map[string]bool{
	sluicev1.ReasonImagePullFailed:            true,
	sluicev1.ReasonCrashLooping:               true,
	sluicev1.ReasonCreateContainerConfigError: true,
	sluicev1.ReasonOOMKilled:                  true,
}

// HealthState is what a health check found.
type HealthState int

// The health states.
const (
	// Progressing: some object is not current yet; look again.
	Progressing HealthState = iota
	// Healthy: every object is current.
	Healthy
	// Unhealthy: an object failed, or a pod is stuck.
	Unhealthy
)

// Health is the result of one health check.
type Health struct {
	State HealthState
	// Message names the object that is not current, or what failed.
	Message string
}

// CheckHealth looks at the workloads (Deployments, StatefulSets,
// DaemonSets) and pods of release in namespace, selected by
// InstanceLabel, with r (an uncached reader: the operator keeps no
// informer on workloads). A pod with a problem in failsAtOnce or an
// object kstatus calls Failed makes it Unhealthy; one not Current yet
// makes it Progressing.
func CheckHealth(ctx context.Context, r client.Reader, namespace, release string) (Health, error) {
	if h, err := podsHealth(ctx, r, namespace, release); err != nil || h.State == Unhealthy {
		return h, err
	}
	opts := []client.ListOption{client.InNamespace(namespace), client.MatchingLabels{InstanceLabel: release}}
	var objs []*unstructured.Unstructured
	var deps appsv1.DeploymentList
	var sts appsv1.StatefulSetList
	var dss appsv1.DaemonSetList
	for _, l := range []client.ObjectList{&deps, &sts, &dss} {
		if err := r.List(ctx, l, opts...); err != nil {
			return Health{}, fmt.Errorf("list the workloads of %s/%s: %w", namespace, release, err)
		}
	}
	add := func(o client.Object, kind string) error {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return fmt.Errorf("convert %s: %w", o.GetName(), err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion("apps/v1")
		u.SetKind(kind)
		objs = append(objs, u)
		return nil
	}
	for i := range deps.Items {
		if err := add(&deps.Items[i], "Deployment"); err != nil {
			return Health{}, err
		}
	}
	for i := range sts.Items {
		if err := add(&sts.Items[i], "StatefulSet"); err != nil {
			return Health{}, err
		}
	}
	for i := range dss.Items {
		if err := add(&dss.Items[i], "DaemonSet"); err != nil {
			return Health{}, err
		}
	}
	return ObjectsHealth(objs, nil)
}

// CheckAppliedHealth is the health of exactly the objects a change
// installed, read live (objs; missing names those that are gone), after
// the release's pods (selected by InstanceLabel with r) show none stuck:
// every object must be current by kstatus, a Failed one makes it
// Unhealthy, and a missing one keeps it Progressing (a health timeout ends
// it).
func CheckAppliedHealth(ctx context.Context, r client.Reader, namespace, release string, objs []*unstructured.Unstructured, missing []string) (Health, error) {
	if h, err := podsHealth(ctx, r, namespace, release); err != nil || h.State == Unhealthy {
		return h, err
	}
	return ObjectsHealth(objs, missing)
}

// podsHealth is Unhealthy when a pod of release is stuck (StuckPod).
func podsHealth(ctx context.Context, r client.Reader, namespace, release string) (Health, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{InstanceLabel: release}); err != nil {
		return Health{}, fmt.Errorf("list the pods of %s/%s: %w", namespace, release, err)
	}
	if msg := StuckPod(pods.Items); msg != "" {
		return Health{State: Unhealthy, Message: msg}, nil
	}
	return Health{State: Healthy}, nil
}

// ObjectsHealth is the kstatus verdict over objs: the first Failed one
// makes it Unhealthy; one not Current, or a missing one, Progressing.
func ObjectsHealth(objs []*unstructured.Unstructured, missing []string) (Health, error) {
	var waiting []string
	for _, m := range missing {
		waiting = append(waiting, m+" is gone")
	}
	for _, u := range objs {
		res, err := status.Compute(u)
		if err != nil {
			return Health{}, fmt.Errorf("kstatus of %s %s: %w", u.GetKind(), u.GetName(), err)
		}
		name := u.GetKind() + " " + u.GetName()
		switch res.Status {
		case status.CurrentStatus:
		case status.FailedStatus:
			return Health{State: Unhealthy, Message: fmt.Sprintf("%s failed: %s", name, res.Message)}, nil
		default:
			waiting = append(waiting, fmt.Sprintf("%s is %s: %s", name, res.Status, res.Message))
		}
	}
	if len(waiting) > 0 {
		return Health{State: Progressing, Message: strings.Join(waiting, "; ")}, nil
	}
	return Health{State: Healthy, Message: fmt.Sprintf("%d objects current", len(objs))}, nil
}

// StuckPod names the first pod (by name) with a problem that fails a
// verification at once (failsAtOnce, read by podhealth); "" when there
// is none.
func StuckPod(pods []corev1.Pod) string {
	var first *podhealth.Problem
	for i := range pods {
		for _, p := range podhealth.Problems(&pods[i]) {
			if failsAtOnce[p.Reason] && (first == nil || p.Pod < first.Pod) {
				first = &p
				break
			}
		}
	}
	if first == nil {
		return ""
	}
	return first.String()
}
