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
	start := time.Now()
	c.installErr = c.installSluice(context.Background())
	if c.installErr != nil {
		fmt.Fprintf(os.Stderr, "e2e: installing charts/sluice failed after %s: %v\n%s", time.Since(start).Round(time.Second), c.installErr, c.dumpInstall())
	} else {
		fmt.Printf("e2e: charts/sluice installed and Ready in %s\n", time.Since(start).Round(time.Second))
	}
	code := m.Run()
	if c.git != nil {
		_ = os.RemoveAll(c.git.dir) // the served repositories and their clones
	}
	os.Exit(code)
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
	theCluster.dumpOnFailure(t)
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

// waitLimit bounds every wait of the e2e tests: a change that never comes
// fails its test with what it waited for, instead of hanging the run until
// go test's -timeout kills it without a word. SLUICE_E2E_WAIT overrides it
// (a Go duration); the default is generous for a machine whose cores are
// busy.
var waitLimit = envDuration("SLUICE_E2E_WAIT", 6*time.Minute)

// envDuration parses the duration in the environment variable name, or
// returns def when it is unset or invalid.
func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d > 0 {
		return d
	}
	return def
}

// WaitTimeoutError says what a wait waited for, how long, and the last
// reason cond gave.
type WaitTimeoutError struct {
	What  string
	After time.Duration
	Last  error
}

func (e *WaitTimeoutError) Error() string {
	return fmt.Sprintf("timed out after %s waiting for %s (last: %v)", e.After.Round(time.Second), e.What, e.Last)
}

// eventually polls cond until it returns true; a returned error is kept
// as the reason shown while and if it never does. The wait is bounded by
// waitLimit: past it the test fails, naming what it waited for.
func eventually(t *testing.T, what string, cond func() (bool, error)) {
	t.Helper()
	if err := poll(t, what, waitLimit, cond); err != nil {
		t.Fatal(err)
	}
}

// poll is eventually returning the time-out as a *WaitTimeoutError. It
// logs every 30 s that it still waits, so a slow run shows where it is.
func poll(t *testing.T, what string, limit time.Duration, cond func() (bool, error)) error {
	t.Helper()
	start := time.Now()
	lastLog := start
	var last error
	for {
		ok, err := cond()
		if ok {
			if d := time.Since(start); d > 10*time.Second {
				t.Logf("waited %s for %s", d.Round(time.Second), what)
			}
			return nil
		}
		last = err
		if time.Since(start) > limit {
			return &WaitTimeoutError{What: what, After: time.Since(start), Last: last}
		}
		if time.Since(lastLog) > 30*time.Second {
			lastLog = time.Now()
			t.Logf("still waiting for %s after %s (last: %v)", what, time.Since(start).Round(time.Second), last)
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
