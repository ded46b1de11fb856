package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// components are the chart's workloads, by their component label.
var components = []string{"operator", "syncer", "runner"}

// componentSelector selects the pods of one of the chart's components.
func componentSelector(component string) string {
	return "app.kubernetes.io/instance=" + releaseName + ",app.kubernetes.io/component=" + component
}

// TestChartInstallsUnderRestrictedPodSecurity: charts/sluice installs with
// the Helm SDK into a namespace enforcing Pod Security "restricted", and
// the operator, syncer and runner pods start and become Ready there.
func TestChartInstallsUnderRestrictedPodSecurity(t *testing.T) {
	c := need(t)
	ns, err := c.cs.CoreV1().Namespaces().Get(context.Background(), sluiceNS, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "restricted" {
		t.Fatalf("namespace %s enforces %q, want restricted", sluiceNS, got)
	}
	for _, comp := range components {
		pods := c.pods(t, sluiceNS, componentSelector(comp))
		if len(pods) == 0 {
			t.Fatalf("no %s pod", comp)
		}
		for i := range pods {
			if !ready(&pods[i]) {
				t.Errorf("%s pod %s is not Ready after helm install --wait", comp, pods[i].Name)
			}
		}
	}
	// The admission is really enforced: a pod breaking "restricted" is refused.
	bad := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "privileged-"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name: "x", Image: testappImage, ImagePullPolicy: corev1.PullNever,
			SecurityContext: &corev1.SecurityContext{Privileged: ptr(true)},
		}}},
	}
	if _, err := c.cs.CoreV1().Pods(sluiceNS).Create(context.Background(), bad, metav1.CreateOptions{}); err == nil {
		t.Fatalf("a privileged pod was admitted into %s: restricted is not enforced", sluiceNS)
	} else {
		t.Logf("privileged pod refused as expected: %v", err)
	}
}

// TestProbesAnswer: every liveness and readiness probe the chart declares
// answers 200 when called like the kubelet calls it (from the node, at the
// pod IP).
func TestProbesAnswer(t *testing.T) {
	c := need(t)
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, comp := range components {
		for _, p := range c.pods(t, sluiceNS, componentSelector(comp)) {
			for _, ctr := range p.Spec.Containers {
				for kind, pr := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe} {
					if pr == nil || pr.HTTPGet == nil {
						t.Errorf("%s/%s has no HTTP %s probe", p.Name, ctr.Name, kind)
						continue
					}
					port := pr.HTTPGet.Port.IntValue()
					if port == 0 {
						port = namedPort(ctr, pr.HTTPGet.Port.String())
					}
					url := fmt.Sprintf("http://%s:%d%s", p.Status.PodIP, port, pr.HTTPGet.Path)
					resp, err := hc.Get(url)
					if err != nil {
						t.Errorf("%s probe of %s: %v", kind, p.Name, err)
						continue
					}
					resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						t.Errorf("%s probe of %s (%s): %s", kind, p.Name, url, resp.Status)
					}
					t.Logf("%s probe %s %s: %s", comp, kind, url, resp.Status)
				}
			}
		}
	}
}

// namedPort resolves a container port name.
func namedPort(ctr corev1.Container, name string) int {
	for _, p := range ctr.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	return 0
}

func ptr[T any](v T) *T { return &v }
