package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// testappImage is the tests' workload image (hack/realnode/images.sh).
const testappImage = "sluice-gitops/testapp:e2e"

// tenantNS is a namespace a tenant's workloads run in.
const tenantNS = "tenant-a"

// Ports the chart's default values give the components.
const (
	syncerArtifacts = 9090
	syncerState     = 8092
	syncerHealth    = 8081
	operatorState   = 8092
	runnerPort      = 8090
)

// TestNetworkPoliciesFenceTheServers: with the chart's NetworkPolicies
// enforced (kube-router), a pod in a tenant namespace cannot open a
// connection to the syncer's artifact server, either state server or the
// runner, while the operator reaches the artifact server and the runner,
// and the tenant still reaches what is open to everyone (the syncer's
// health port): the refusals are the policies, not a broken network.
func TestNetworkPoliciesFenceTheServers(t *testing.T) {
	c := need(t)
	if _, err := os.Stat(filepath.Join(c.stateDir, "no-firewall")); err == nil {
		t.Fatal("NetworkPolicies are not enforced on this node: kube-router is missing (make node)")
	}
	tenant := c.startTestapp(t, tenantNS, "client", nil)
	tenantPID := c.podPID(t, tenant)
	syncer := c.readyPod(t, sluiceNS, componentSelector("syncer"))
	operator := c.readyPod(t, sluiceNS, componentSelector("operator"))
	runner := c.readyPod(t, sluiceNS, componentSelector("runner"))
	operatorPID := c.podPID(t, operator)

	open := func(who string, pid int, ip string, port int) {
		t.Helper()
		eventually(t, fmt.Sprintf("%s → %s:%d allowed", who, ip, port), func() (bool, error) {
			code, err := dial(pid, ip, port)
			return err == nil, fmt.Errorf("%s (HTTP %s)", err, code)
		})
		t.Logf("%s → %s:%d connects, as it should", who, ip, port)
	}
	closed := func(who string, pid int, ip string, port int, what string) {
		t.Helper()
		// kube-router programs a new pod's rules within seconds: wait for
		// the refusal, then make sure it holds for fresh connections.
		eventually(t, fmt.Sprintf("%s → %s blocked", who, what), func() (bool, error) {
			_, err := dial(pid, ip, port)
			return err != nil, nil
		})
		for i := 0; i < 3; i++ {
			if code, err := dial(pid, ip, port); err == nil {
				t.Errorf("%s reached %s (%s:%d, HTTP %s)", who, what, ip, port, code)
				return
			}
		}
		t.Logf("%s → %s (%s:%d) blocked, as it should", who, what, ip, port)
	}

	open("tenant pod", tenantPID, syncer.Status.PodIP, syncerHealth)
	closed("tenant pod", tenantPID, syncer.Status.PodIP, syncerArtifacts, "the artifact server")
	closed("tenant pod", tenantPID, syncer.Status.PodIP, syncerState, "the syncer's state server")
	closed("tenant pod", tenantPID, operator.Status.PodIP, operatorState, "the operator's state server")
	closed("tenant pod", tenantPID, runner.Status.PodIP, runnerPort, "the runner")
	open("operator", operatorPID, syncer.Status.PodIP, syncerArtifacts)
	open("operator", operatorPID, runner.Status.PodIP, runnerPort)
}

// dial opens a new HTTP connection from the network namespace of the
// process pid (nsenter with the node's curl, so no client image is needed)
// and returns the HTTP status; an error means no connection was made.
func dial(pid int, ip string, port int) (string, error) {
	out, err := exec.Command("nsenter", "-t", fmt.Sprint(pid), "-n", "curl", "-s", "-m", "3", "-o", "/dev/null",
		"-w", "%{http_code}", fmt.Sprintf("http://%s:%d/", ip, port)).Output()
	code := strings.TrimSpace(string(out))
	if code == "000" || code == "" {
		if err == nil {
			err = errors.New("no HTTP answer")
		}
		return code, fmt.Errorf("no connection: %w", err)
	}
	return code, nil
}

// startTestapp runs one testapp pod (Pod Security "restricted" compliant)
// in ns, creating ns if needed, and waits until it is Ready.
func (c *cluster) startTestapp(t *testing.T, ns, name string, labels map[string]string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	if _, err := c.cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if labels == nil {
		labels = map[string]string{}
	}
	labels["app"] = name
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{testappContainer()},
			SecurityContext: &corev1.PodSecurityContext{
				RunAsNonRoot:   ptr(true),
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
			},
		},
	}
	if _, err := c.cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.cs.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: ptr[int64](0)})
	})
	var got *corev1.Pod
	eventually(t, "pod "+ns+"/"+name+" Ready", func() (bool, error) {
		p, err := c.cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = p
		return ready(p), fmt.Errorf("phase %s", p.Status.Phase)
	})
	return got
}

// testappContainer is the testapp container, "restricted" compliant.
func testappContainer() corev1.Container {
	return corev1.Container{
		Name: "testapp", Image: testappImage, ImagePullPolicy: corev1.PullNever,
		Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
			Path: "/readyz", Port: intstrName("http")}}, PeriodSeconds: 1},
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			RunAsNonRoot:             ptr(true),
			ReadOnlyRootFilesystem:   ptr(true),
		},
	}
}

// readyPod returns a Ready pod matching selector in ns, waiting for one.
func (c *cluster) readyPod(t *testing.T, ns, selector string) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	eventually(t, "a Ready pod "+selector, func() (bool, error) {
		for _, p := range c.pods(t, ns, selector) {
			if ready(&p) && p.DeletionTimestamp == nil {
				got = &p
				return true, nil
			}
		}
		return false, nil
	})
	return got
}

// podPID is the host PID of the pod's first container, found through the
// container ID in the processes' cgroup paths.
func (c *cluster) podPID(t *testing.T, p *corev1.Pod) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	_, id, ok := strings.Cut(p.Status.ContainerStatuses[0].ContainerID, "://")
	if !ok || id == "" {
		t.Fatalf("pod %s: container ID %q", p.Name, p.Status.ContainerStatuses[0].ContainerID)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, f := range procs {
		b, err := os.ReadFile(f)
		if err != nil || !strings.Contains(string(b), id) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(filepath.Base(filepath.Dir(f)), "%d", &pid); err == nil {
			return pid
		}
	}
	t.Fatalf("no process of pod %s (container %s) found", p.Name, id)
	return 0
}
