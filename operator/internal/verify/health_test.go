package verify

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func podWith(name string, st corev1.PodStatus) corev1.Pod {
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: st}
}

func waitingIn(reason string) corev1.PodStatus {
	return corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name: "app", Image: "shop/cart:1.2",
		State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: "m"}},
	}}}
}

func TestStuckPod_failsAtOnceOnlyOnWhatAPodDoesNotLeave(t *testing.T) {
	oom := corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{
		Name:  "app",
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}},
	}}}
	unschedulable := corev1.PodStatus{Conditions: []corev1.PodCondition{{
		Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/1 nodes",
	}}}
	for _, tc := range []struct {
		name string
		pods []corev1.Pod
		want string // "" = none
	}{
		{"image pull back-off", []corev1.Pod{podWith("a", waitingIn("ImagePullBackOff"))}, "pod a container app image shop/cart:1.2: ImagePullBackOff"},
		{"err image pull", []corev1.Pod{podWith("a", waitingIn("ErrImagePull"))}, "ErrImagePull"},
		{"crash loop", []corev1.Pod{podWith("a", waitingIn("CrashLoopBackOff"))}, "CrashLoopBackOff"},
		{"config error", []corev1.Pod{podWith("a", waitingIn("CreateContainerConfigError"))}, "CreateContainerConfigError"},
		{"oom killed", []corev1.Pod{podWith("a", oom)}, "OOMKilled"},
		{"starting", []corev1.Pod{podWith("a", waitingIn("ContainerCreating"))}, ""},
		{"unschedulable waits for the deadline", []corev1.Pod{podWith("a", unschedulable)}, ""},
		{"first by name whatever the order", []corev1.Pod{podWith("b", waitingIn("CrashLoopBackOff")), podWith("a", waitingIn("ErrImagePull"))}, "pod a "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := StuckPod(tc.pods)
			if tc.want == "" {
				if got != "" {
					t.Fatalf("StuckPod = %q, want none", got)
				}
				return
			}
			if !strings.Contains(got, tc.want) {
				t.Fatalf("StuckPod = %q, want it to contain %q", got, tc.want)
			}
		})
	}
}
