package podhealth

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func pod(name string, mutate func(*corev1.Pod)) corev1.Pod {
	p := corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{InstanceLabel: "web", "other": "x"}, Annotations: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.invalid/web:1",
			Env: []corev1.EnvVar{{Name: "TOKEN", Value: "s3cret"}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{Name: "app"}}},
	}
	mutate(&p)
	return p
}

func waiting(reason, msg string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.Status.ContainerStatuses[0].State.Waiting = &corev1.ContainerStateWaiting{Reason: reason, Message: msg}
	}
}

func TestProblems_namesTheReasonImageAndMessage(t *testing.T) {
	for _, tc := range []struct {
		name          string
		pod           corev1.Pod
		reason, state string
		message       string
	}{
		{"an image that cannot be pulled is ImagePullFailed with the registry's message",
			pod("a", waiting("ErrImagePull", `failed to pull image "registry.invalid/web:1": not found`)),
			sluicev1.ReasonImagePullFailed, "ErrImagePull", "not found"},
		{"a pull back-off is ImagePullFailed too", pod("a", waiting("ImagePullBackOff", "Back-off pulling image")),
			sluicev1.ReasonImagePullFailed, "ImagePullBackOff", "Back-off"},
		{"a crash loop is CrashLooping with the last exit", pod("a", func(p *corev1.Pod) {
			waiting("CrashLoopBackOff", "back-off 5m0s restarting failed container")(p)
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: 3}
		}), sluicev1.ReasonCrashLooping, "CrashLoopBackOff", "Error (exit code 3)"},
		{"a crash loop after an OOM kill is OOMKilled", pod("a", func(p *corev1.Pod) {
			waiting("CrashLoopBackOff", "back-off")(p)
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "OOMKilled", ExitCode: 137}
		}), sluicev1.ReasonOOMKilled, "OOMKilled", "exit code 137"},
		{"a missing ConfigMap is CreateContainerConfigError", pod("a", waiting("CreateContainerConfigError", `configmap "cfg" not found`)),
			sluicev1.ReasonCreateContainerConfigError, "CreateContainerConfigError", `configmap "cfg" not found`},
		{"a pod no node fits is Unschedulable with the scheduler's message", pod("a", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: "0/3 nodes are available: 3 Insufficient cpu."}}
		}), sluicev1.ReasonUnschedulable, "Unschedulable", "Insufficient cpu"},
		{"an evicted pod is PodFailed", pod("a", func(p *corev1.Pod) {
			p.Status.Phase, p.Status.Reason, p.Status.Message = corev1.PodFailed, "Evicted", "The node was low on resource: memory."
		}), sluicev1.ReasonPodFailed, "Evicted", "low on resource"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps := Problems(&tc.pod)
			if len(ps) != 1 {
				t.Fatalf("want one problem, got %v", ps)
			}
			p := ps[0]
			if p.Reason != tc.reason || p.State != tc.state || !contains(p.Message, tc.message) {
				t.Fatalf("got %+v, want reason %s state %s message containing %q", p, tc.reason, tc.state, tc.message)
			}
			if p.Container != "" && p.Image != "registry.invalid/web:1" {
				t.Fatalf("the image is not named: %+v", p)
			}
		})
	}
}

func TestProblems_healthyRecoveredAndDeletedPodsHaveNone(t *testing.T) {
	for name, p := range map[string]corev1.Pod{
		"creating": pod("a", waiting("ContainerCreating", "")),
		"running": pod("a", func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{}
		}),
		"running again after an OOM kill": pod("a", func(p *corev1.Pod) {
			p.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{}
			p.Status.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{Reason: "OOMKilled"}
		}),
		"being deleted": pod("a", func(p *corev1.Pod) {
			waiting("ImagePullBackOff", "")(p)
			p.DeletionTimestamp = &metav1.Time{}
		}),
	} {
		if ps := Problems(&p); len(ps) != 0 {
			t.Errorf("%s: got problems %v", name, ps)
		}
	}
}

func TestFirst_isTheSameWhateverTheListOrder(t *testing.T) {
	a := pod("web-a", waiting("ImagePullBackOff", "x"))
	b := pod("web-b", waiting("CrashLoopBackOff", "y"))
	for _, pods := range [][]corev1.Pod{{a, b}, {b, a}} {
		p, ok := First(pods)
		if !ok || p.Pod != "web-a" {
			t.Fatalf("First = %+v, %v", p, ok)
		}
	}
}

func TestKey_ignoresRestartCountsAndMessages(t *testing.T) {
	a := pod("a", waiting("CrashLoopBackOff", "back-off 10s"))
	b := pod("a", func(p *corev1.Pod) {
		waiting("CrashLoopBackOff", "back-off 20s")(p)
		p.Status.ContainerStatuses[0].RestartCount = 4
	})
	if Key(&a) != Key(&b) {
		t.Fatal("a restart changed the key")
	}
	c := pod("a", func(p *corev1.Pod) { p.Status.ContainerStatuses[0].State.Running = &corev1.ContainerStateRunning{} })
	if Key(&a) == Key(&c) {
		t.Fatal("recovering did not change the key")
	}
}

func TestSlim_keepsWhatHealthReadsAndNoEnvironment(t *testing.T) {
	p := pod("a", waiting("ErrImagePull", "nope"))
	out, err := Slim(&p)
	if err != nil {
		t.Fatal(err)
	}
	s := out.(*corev1.Pod)
	if len(s.Spec.Containers[0].Env) != 0 || len(s.Annotations) != 0 || s.Labels["other"] != "" {
		t.Fatalf("slim pod keeps more than health reads: %+v", s)
	}
	if got, want := Problems(s), Problems(&p); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("slim pod's problems %v differ from %v", got, want)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Credentials in a URL of a kubelet's message never reach a Problem.
func TestProblems_redactURLCredentials(t *testing.T) {
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1"}, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "reg.example.com/web:2"}}},
		Status: corev1.PodStatus{ContainerStatuses: []corev1.ContainerStatus{{Name: "web", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{
			Reason: "ErrImagePull", Message: `failed to do request: Head "https://robot:s3cr3t-token@reg.example.com/v2/web/manifests/2": proxyconnect tcp: dial http://u:p@proxy:3128`}}}}}}
	ps := Problems(&p)
	if len(ps) != 1 {
		t.Fatalf("want one problem, got %v", ps)
	}
	for _, secret := range []string{"s3cr3t-token", "robot", "u:p@"} {
		if strings.Contains(ps[0].Message, secret) {
			t.Errorf("the message keeps %q: %s", secret, ps[0].Message)
		}
	}
	if !strings.Contains(ps[0].Message, `"https://***@reg.example.com/v2/web/manifests/2"`) || !strings.Contains(ps[0].Message, "http://***@proxy:3128") {
		t.Errorf("the message lost more than the credentials: %s", ps[0].Message)
	}
}
