package verify

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
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

func obj(t *testing.T, y string) *unstructured.Unstructured {
	t.Helper()
	j, err := yaml.YAMLToJSON([]byte(y))
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	// As the API server's answers are decoded: integers stay int64.
	if err := u.UnmarshalJSON(j); err != nil {
		t.Fatal(err)
	}
	return u
}

// ObjectsHealth judges exactly the objects given: all current is Healthy,
// a Failed one (a Job past its backoff limit) Unhealthy, one still rolling
// out or gone Progressing.
func TestObjectsHealth_judgesEveryObjectTheChangeInstalled(t *testing.T) {
	cm := obj(t, "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web-config, generation: 1}\n")
	current := obj(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 2}
spec: {replicas: 2}
status: {observedGeneration: 2, replicas: 2, updatedReplicas: 2, readyReplicas: 2, availableReplicas: 2,
  conditions: [{type: Available, status: "True"}, {type: Progressing, status: "True", reason: NewReplicaSetAvailable}]}
`)
	rolling := obj(t, `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, generation: 3}
spec: {replicas: 2}
status: {observedGeneration: 3, replicas: 2, updatedReplicas: 1, readyReplicas: 2, availableReplicas: 2}
`)
	failedJob := obj(t, `apiVersion: batch/v1
kind: Job
metadata: {name: migrate, generation: 1}
spec: {backoffLimit: 1}
status: {failed: 2, conditions: [{type: Failed, status: "True", reason: BackoffLimitExceeded, message: "Job has reached the specified backoff limit"}]}
`)
	for _, tc := range []struct {
		name    string
		objs    []*unstructured.Unstructured
		missing []string
		state   HealthState
		says    string
	}{
		{"all current", []*unstructured.Unstructured{cm, current}, nil, Healthy, "2 objects current"},
		{"a rollout in progress", []*unstructured.Unstructured{cm, rolling}, nil, Progressing, "Deployment web is InProgress"},
		{"a failed job", []*unstructured.Unstructured{cm, current, failedJob}, nil, Unhealthy, "Job migrate failed"},
		{"an object gone", []*unstructured.Unstructured{current}, []string{"ConfigMap web/web-config"}, Progressing, "ConfigMap web/web-config is gone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, err := ObjectsHealth(tc.objs, tc.missing)
			if err != nil {
				t.Fatal(err)
			}
			if h.State != tc.state || !strings.Contains(h.Message, tc.says) {
				t.Fatalf("ObjectsHealth = %+v, want state %d saying %q", h, tc.state, tc.says)
			}
		})
	}
}
