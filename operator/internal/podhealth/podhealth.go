// Package podhealth reads what is wrong with a release's pods from their
// status alone: the container states a pod does not leave by itself
// (image pull failures, crash loops, OOM kills, config errors), the
// scheduler's verdict and failed pods. It is pure (no API calls): the
// Release reconciler keeps the first problem as the Release's Degraded
// condition, and `kubectl sluice diagnose` prints every pod with them.
package podhealth

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// InstanceLabel selects the pods of a Helm release (the label every chart
// made with `helm create` sets to the release's name, and the one the
// verification reads too).
const InstanceLabel = "app.kubernetes.io/instance"

// Problem is one stuck container or pod.
type Problem struct {
	// Reason is the Degraded reason (sluicev1.ReasonImagePullFailed...).
	Reason string `json:"reason"`
	// Pod and Container name where; Container is empty for a pod-level
	// problem (Unschedulable, PodFailed).
	Pod       string `json:"pod"`
	Container string `json:"container,omitempty"`
	// Image is the container's image.
	Image string `json:"image,omitempty"`
	// State is the kubelet's (or the scheduler's) own reason, such as
	// ImagePullBackOff or ErrImagePull.
	State string `json:"state"`
	// Message is the kubelet's or the scheduler's message.
	Message string `json:"message,omitempty"`
}

// Subject names where the problem is: pod, container and image.
func (p Problem) Subject() string {
	s := "pod " + p.Pod
	if p.Container != "" {
		s += " container " + p.Container
	}
	if p.Image != "" {
		s += " image " + p.Image
	}
	return s
}

// String is the problem in one line: subject, state and message.
func (p Problem) String() string {
	s := p.Subject() + ": " + p.State
	if p.Message != "" {
		s += ": " + p.Message
	}
	return s
}

// waitingReasons map the kubelet's waiting reasons that a container does
// not leave by itself to the Degraded reason.
var waitingReasons = map[string]string{
	"ErrImagePull":               sluicev1.ReasonImagePullFailed,
	"ImagePullBackOff":           sluicev1.ReasonImagePullFailed,
	"InvalidImageName":           sluicev1.ReasonImagePullFailed,
	"ErrImageNeverPull":          sluicev1.ReasonImagePullFailed,
	"CrashLoopBackOff":           sluicev1.ReasonCrashLooping,
	"CreateContainerConfigError": sluicev1.ReasonCreateContainerConfigError,
	"CreateContainerError":       sluicev1.ReasonCreateContainerConfigError,
	"RunContainerError":          sluicev1.ReasonCrashLooping,
}

// Problems lists what is stuck in pod: each container (init containers
// first) in a waiting state of waitingReasons or terminated by the OOM
// killer and not running again, a pod the scheduler cannot place, a pod
// in phase Failed. A pod being deleted has none.
func Problems(pod *corev1.Pod) []Problem {
	if pod.DeletionTimestamp != nil {
		return nil
	}
	var out []Problem
	if pod.Status.Phase == corev1.PodFailed {
		out = append(out, Problem{Reason: sluicev1.ReasonPodFailed, Pod: pod.Name, State: orDefault(pod.Status.Reason, "Failed"), Message: Redact(pod.Status.Message)})
		return out
	}
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			out = append(out, Problem{Reason: sluicev1.ReasonUnschedulable, Pod: pod.Name, State: c.Reason, Message: Redact(c.Message)})
		}
	}
	images := specImages(pod)
	statuses := append(slices.Clone(pod.Status.InitContainerStatuses), pod.Status.ContainerStatuses...)
	for _, cs := range statuses {
		image := cs.Image
		if image == "" {
			image = images[cs.Name]
		}
		p := Problem{Pod: pod.Name, Container: cs.Name, Image: image}
		switch w, t, last := cs.State.Waiting, cs.State.Terminated, cs.LastTerminationState.Terminated; {
		case t != nil && t.Reason == "OOMKilled":
			p.Reason, p.State, p.Message = sluicev1.ReasonOOMKilled, t.Reason, exitMessage(t)
		case w != nil && w.Reason == "CrashLoopBackOff" && last != nil && last.Reason == "OOMKilled":
			// Restarted after an OOM kill and waiting to restart again:
			// the memory limit is what to fix.
			p.Reason, p.State, p.Message = sluicev1.ReasonOOMKilled, last.Reason, exitMessage(last)
		case w != nil && waitingReasons[w.Reason] != "":
			p.Reason, p.State, p.Message = waitingReasons[w.Reason], w.Reason, Redact(w.Message)
			if w.Reason == "CrashLoopBackOff" && last != nil {
				p.Message = strings.TrimSpace(p.Message + "; last exit: " + exitMessage(last))
			}
		default:
			continue
		}
		out = append(out, p)
	}
	return out
}

// First is the first problem of pods, by pod name (then container order):
// the same pods give the same answer whatever order they were listed in.
func First(pods []corev1.Pod) (Problem, bool) {
	var best *Problem
	for i := range pods {
		ps := Problems(&pods[i])
		if len(ps) > 0 && (best == nil || ps[0].Pod < best.Pod) {
			best = &ps[0]
		}
	}
	if best == nil {
		return Problem{}, false
	}
	return *best, true
}

// Key is what of pod matters to its health, as one comparable string: its
// problems (without restart counts or times, which change on their own).
func Key(pod *corev1.Pod) string {
	var b strings.Builder
	for _, p := range Problems(pod) {
		b.WriteString(p.Reason + "\x00" + p.Subject() + "\x00" + p.State + "\n")
	}
	return b.String()
}

// specImages maps container names to the images of the pod's spec.
func specImages(pod *corev1.Pod) map[string]string {
	m := map[string]string{}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		m[c.Name] = c.Image
	}
	return m
}

// exitMessage describes a termination: reason, exit code and message.
func exitMessage(t *corev1.ContainerStateTerminated) string {
	s := fmt.Sprintf("%s (exit code %d)", orDefault(t.Reason, "Error"), t.ExitCode)
	if t.Message != "" {
		s += ": " + Redact(t.Message)
	}
	return s
}

// userinfo matches the credentials of a URL ("scheme://user:secret@").
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/@\s"']+@`)

// Redact removes the credentials of any URL in a kubelet's or a
// registry's message (a registry or proxy address may carry them), so
// neither the Release's condition nor diagnose repeats them. The kubelet
// names missing ConfigMap and Secret keys, never their values, and pods
// hold no Secret data in their status.
func Redact(msg string) string { return userinfo.ReplaceAllString(msg, "${1}***@") }

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Slim keeps of a pod what Problems, diagnose's report and the mapping to
// its Release read (name, namespace, labels, owners, node, images, phase,
// conditions, container states), and drops the rest (env, volumes,
// probes, annotations, managed fields): the operator's pod cache holds
// only this. It is a cache.TransformFunc.
func Slim(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: pod.TypeMeta}
	out.Name, out.Namespace, out.UID, out.ResourceVersion = pod.Name, pod.Namespace, pod.UID, pod.ResourceVersion
	out.Generation, out.CreationTimestamp, out.DeletionTimestamp = pod.Generation, pod.CreationTimestamp, pod.DeletionTimestamp
	if v, ok := pod.Labels[InstanceLabel]; ok {
		out.Labels = map[string]string{InstanceLabel: v}
	}
	out.OwnerReferences = pod.OwnerReferences
	out.Spec.NodeName = pod.Spec.NodeName
	slim := func(cs []corev1.Container) []corev1.Container {
		var r []corev1.Container
		for _, c := range cs {
			r = append(r, corev1.Container{Name: c.Name, Image: c.Image})
		}
		return r
	}
	out.Spec.InitContainers, out.Spec.Containers = slim(pod.Spec.InitContainers), slim(pod.Spec.Containers)
	out.Status = corev1.PodStatus{
		Phase: pod.Status.Phase, Reason: pod.Status.Reason, Message: pod.Status.Message,
		Conditions: pod.Status.Conditions, InitContainerStatuses: pod.Status.InitContainerStatuses,
		ContainerStatuses: pod.Status.ContainerStatuses, StartTime: pod.Status.StartTime,
	}
	return out, nil
}
