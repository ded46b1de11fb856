package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// cluster is the node `make e2e` brought up, with Sluice installed.
type cluster struct {
	kubeconfig string
	cfg        *rest.Config
	cs         kubernetes.Interface
	c          client.Client
	// root is the repository's top folder (charts, bin).
	root string
	// stateDir is hack/realnode's state folder (containerd socket, logs).
	stateDir string
	// installErr is why charts/sluice did not install, if it did not.
	installErr error
	// git is the infra repository the syncer watches (serveGit).
	git     *gitServer
	gitErr  error
	gitOnce sync.Once
}

// sluiceNS is the namespace the chart is installed into, with Pod Security
// Admission "restricted" enforced.
const sluiceNS = "sluice-system"

// releaseName is the chart's release; its objects are named sluice-*.
const releaseName = "sluice"

var theCluster *cluster

func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_E2E") != "1" {
		// Skipped tests, not failures: a real node needs root and `make e2e`.
		os.Exit(m.Run())
	}
	c, err := connect()
	if err != nil {
		fmt.Fprintf(os.Stderr, "e2e: %v\n", err)
		os.Exit(1)
	}
	theCluster = c
	c.installErr = c.installSluice(context.Background())
	if c.installErr != nil {
		fmt.Fprintf(os.Stderr, "e2e: installing charts/sluice: %v\n", c.installErr)
	}
	os.Exit(m.Run())
}

// need returns the cluster, skipping the test when the e2e suite is off and
// failing it when Sluice did not install.
func need(t *testing.T) *cluster {
	t.Helper()
	if theCluster == nil {
		t.Skip("e2e tests run on a real node only: make e2e (SLUICE_E2E=1)")
	}
	if theCluster.installErr != nil {
		t.Fatalf("charts/sluice did not install: %v", theCluster.installErr)
	}
	return theCluster
}

// connect builds the clients from $KUBECONFIG (up.sh's admin kubeconfig).
func connect() (*cluster, error) {
	kc := os.Getenv("KUBECONFIG")
	if kc == "" {
		return nil, fmt.Errorf("KUBECONFIG is not set: run through make e2e")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", kc, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return nil, err
	}
	if err := sluicev1.AddToScheme(scheme); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return nil, err
	}
	root, err := filepath.Abs("..")
	if err != nil {
		return nil, err
	}
	state := os.Getenv("REALNODE_DIR")
	if state == "" {
		state = "/tmp/sluice-realnode"
	}
	return &cluster{kubeconfig: kc, cfg: cfg, cs: cs, c: c, root: root, stateDir: state}, nil
}

// eventually polls cond every interval until it returns true; a returned
// error is kept as the reason shown if the test ends first. There is no
// deadline of its own: go test's -timeout bounds the whole run.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	var last error
	for i := 0; ; i++ {
		ok, err := cond()
		if ok {
			return
		}
		last = err
		if i > 0 && i%120 == 0 {
			t.Logf("still waiting for %s (last: %v)", what, last)
		}
		time.Sleep(500 * time.Millisecond) // polling interval, not a wait for an outcome
	}
}

// pods lists the pods of ns matching the label selector.
func (c *cluster) pods(t *testing.T, ns, selector string) []corev1.Pod {
	t.Helper()
	l, err := c.cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatalf("listing pods %s in %s: %v", selector, ns, err)
	}
	return l.Items
}

// ready reports whether the pod's Ready condition is true.
func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// intstrName is a named port.
func intstrName(name string) intstr.IntOrString { return intstr.FromString(name) }

// errorsAs is errors.As.
func errorsAs(err error, target any) bool { return errors.As(err, target) }
