package tfstate_test

import (
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
	"github.com/sluice-gitops/sluice/kit/testenv"
)

// The envtest control plane (started by the first test that needs it), a
// clientset for it, a kubeconfig of an admin user for Terraform's
// kubernetes backend, and the terraform binary.
var (
	suite      = &testenv.Suite{Lazy: true, Setup: setup}
	env        *testenv.Env
	cs         kubernetes.Interface
	kubeconfig string
	terraform  string
)

func TestMain(m *testing.M) {
	runner.MaybeRunChild() // the runner child of the attack tests
	suite.Main(m)
}

func setup(e *testenv.Env) error {
	env = e
	var err error
	if terraform, err = exec.LookPath("terraform"); err != nil {
		return fmt.Errorf("terraform is not in PATH: %w", err)
	}
	if cs, err = kubernetes.NewForConfig(e.Config); err != nil {
		return err
	}
	kubeconfig, err = e.AdminKubeconfig("terraform-admin")
	return err
}

// startEnv starts the control plane once, for the tests that need it; the
// token tests and the fuzz test run without it.
func startEnv(t *testing.T) {
	t.Helper()
	suite.Env(t)
}

// stateServer is a tfstate.Server on a loopback port, with a clock
// the test moves and the log lines it wrote.
type stateServer struct {
	*tfstate.Server
	clock *clock
	logs  *logBuffer
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type logBuffer struct {
	mu    sync.Mutex
	lines []string
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.Join(b.lines, "\n")
}

func newStateServer(t *testing.T, opts tfstate.Options) *stateServer {
	t.Helper()
	startEnv(t)
	logs := &logBuffer{}
	c := &clock{now: time.Now()}
	opts.Now = c.Now
	opts.Log = funcr.New(func(prefix, args string) {
		logs.mu.Lock()
		defer logs.mu.Unlock()
		logs.lines = append(logs.lines, prefix+" "+args)
	}, funcr.Options{Verbosity: 1})
	return &stateServer{Server: tfstatetest.New(t, env.Config, opts), clock: c, logs: logs}
}

// newNamespace creates a namespace of its own for one test.
func newNamespace(t *testing.T) string { return suite.Env(t).Namespace(t, "tfstate-") }

// httpBackend is the override Sluice writes: everything else comes from
// TF_HTTP_* in the environment.
const httpBackend = `terraform {
  backend "http" {}
}
`

// stack writes a stack with one terraform_data resource whose input is
// var.v and an output, plus backend, into a new folder.
func stack(t *testing.T, backend string) string {
	t.Helper()
	dir := t.TempDir()
	main := backend + `
variable "v" {
  type = string
}

resource "terraform_data" "x" {
  input = var.v
}

output "v" {
  value = terraform_data.x.output
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func kubernetesBackend(ns, release string) string {
	return fmt.Sprintf(`terraform {
  backend "kubernetes" {
    namespace     = %q
    secret_suffix = %q
  }
}
`, ns, release)
}

// tf runs terraform in dir with an environment built from nothing but
// env, PATH and a HOME of its own, and returns its combined output.
func tf(t *testing.T, dir string, env map[string]string, args ...string) (string, error) {
	t.Helper()
	cmd := tfCmd(t, dir, env, args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func tfCmd(t *testing.T, dir string, env map[string]string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(terraform, args...)
	cmd.Dir = dir
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + dir,
		"TF_DATA_DIR=" + filepath.Join(dir, ".terraform"),
		"TF_IN_AUTOMATION=1",
		"CHECKPOINT_DISABLE=1",
		"TF_CLI_CONFIG_FILE=" + filepath.Join(dir, "no-such.tfrc"),
	}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	return cmd
}

func mustTF(t *testing.T, dir string, env map[string]string, args ...string) string {
	t.Helper()
	out, err := tf(t, dir, env, args...)
	if err != nil {
		t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// tfState is the part of a state file the tests look at.
type tfState struct {
	Serial    uint64                     `json:"serial"`
	Lineage   string                     `json:"lineage"`
	Outputs   map[string]json.RawMessage `json:"outputs"`
	Resources []struct {
		Type, Name string
		Instances  []struct {
			Attributes map[string]any `json:"attributes"`
		} `json:"instances"`
	} `json:"resources"`
}

// input returns terraform_data.x's input, "" when the state has no such
// resource.
func (s tfState) input() string {
	for _, r := range s.Resources {
		if r.Type == "terraform_data" && r.Name == "x" && len(r.Instances) == 1 {
			// terraform_data's input is dynamic: {"type": ..., "value": ...}.
			in, _ := r.Instances[0].Attributes["input"].(map[string]any)
			v, _ := in["value"].(string)
			return v
		}
	}
	return ""
}

// do sends one request with cred's basic auth (none when cred is nil).
func do(t *testing.T, method, url string, cred *tfstate.Credential, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if cred != nil {
		req.SetBasicAuth(cred.Username, cred.Password)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, got
}

// getState reads the state through the server with cred.
func getState(t *testing.T, cred tfstate.Credential) tfState {
	t.Helper()
	code, body := do(t, http.MethodGet, cred.Address, &cred, nil)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", cred.Address, code, body)
	}
	var st tfState
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// secretState reads the state straight from its Secret, as the kubernetes
// backend stores it.
func secretState(t *testing.T, ns, name string) (tfState, *corev1.Secret) {
	t.Helper()
	sec, err := cs.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := gunzip(sec.Data["tfstate"])
	if err != nil {
		t.Fatal(err)
	}
	var st tfState
	if err := json.Unmarshal(raw, &st); err != nil {
		t.Fatal(err)
	}
	return st, sec
}

// zipContains says whether any file inside the zip archive (a plan file)
// contains needle.
func zipContains(t *testing.T, archive []byte, needle string) bool {
	t.Helper()
	zr, err := zip.NewReader(bytes.NewReader(archive), int64(len(archive)))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(needle)) {
			return true
		}
	}
	return bytes.Contains(archive, []byte(needle))
}

func lockBody(id string) []byte {
	b, _ := json.Marshal(map[string]any{"ID": id, "Operation": "OperationTypePlan", "Who": "test@host", "Version": "1.11.4", "Created": time.Now().UTC(), "Path": ""})
	return b
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	return io.ReadAll(zr)
}
