package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gitPort is where the test serves the infra repository on the node (git
// over HTTP); the chart's syncer NetworkPolicy is opened to it.
const gitPort = 18418

// commandTimeout bounds every command a test runs (git, kubectl sluice):
// one that hangs fails its test instead of the run.
const commandTimeout = 2 * time.Minute

// gitServer serves bare repositories under dir over git's smart HTTP
// protocol (the real `git http-backend`), on the node's IP so the syncer
// pod reaches it.
type gitServer struct {
	dir  string
	work string
	url  string
}

// serveGit returns the run's git server, starting it on first use with
// one bare repository "infra" (branch main) and a clone of it to commit
// in; the tests share it, each with its own service folder, as a team's
// infra repository is shared. It lives as long as the test process.
func (c *cluster) serveGit(t *testing.T) *gitServer {
	t.Helper()
	c.gitOnce.Do(func() { c.git, c.gitErr = c.startGit(t) })
	if c.gitErr != nil {
		t.Fatal(c.gitErr)
	}
	return c.git
}

func (c *cluster) startGit(t *testing.T) (*gitServer, error) {
	root, err := os.MkdirTemp("", "sluice-e2e-git-")
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf(":%d", gitPort))
	if err != nil {
		return nil, fmt.Errorf("serving git on :%d: %w", gitPort, err)
	}
	h := &cgi.Handler{Path: "/usr/bin/git", Args: []string{"http-backend"}, Env: []string{
		"GIT_PROJECT_ROOT=" + root, "GIT_HTTP_EXPORT_ALL=1"}}
	srv := &http.Server{Handler: h}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintf(os.Stderr, "e2e: git server: %v\n", err)
		}
	}()
	g := newRepo(t, root, fmt.Sprintf("http://%s:%d", c.nodeIP(t), gitPort), "infra")
	c.setupControlNamespace(t, g.url)
	return g, nil
}

// newRepo makes bare repository <name>.git (branch main) under the
// server's root dir and a clone of it to commit in; base is the server's
// URL as the pods reach it.
func newRepo(t *testing.T, root, base, name string) *gitServer {
	t.Helper()
	g := &gitServer{dir: root, work: filepath.Join(root, "work-"+name), url: base + "/" + name + ".git"}
	git(t, root, "init", "-q", "--bare", "-b", "main", name+".git")
	git(t, root, "clone", "-q", filepath.Join(root, name+".git"), g.work)
	return g
}

// anotherRepo serves one more repository beside "infra" from the same
// server (for a second Repository: a shard's, the demo's).
func (c *cluster) anotherRepo(t *testing.T, name string) *gitServer {
	t.Helper()
	infra := c.serveGit(t)
	return newRepo(t, infra.dir, strings.TrimSuffix(infra.url, "/infra.git"), name)
}

// commit commits everything in the clone with message and pushes it; it
// returns the commit's hash.
func (g *gitServer) commit(t *testing.T, message string) string {
	t.Helper()
	git(t, g.work, "add", "-A")
	git(t, g.work, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", message)
	git(t, g.work, "push", "-q", "origin", "HEAD:main")
	return git(t, g.work, "rev-parse", "HEAD")
}

// git runs git in dir and returns its trimmed output.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), commandTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v (bounded by %s): %v\n%s", args, commandTimeout, err, out)
	}
	return string(trimNL(out))
}

func trimNL(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// nodeIP is the node's InternalIP, where pods reach the host.
func (c *cluster) nodeIP(t *testing.T) string {
	t.Helper()
	nodes, err := c.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil || len(nodes.Items) == 0 {
		t.Fatalf("listing nodes: %v", err)
	}
	for _, a := range nodes.Items[0].Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	t.Fatal("the node has no InternalIP")
	return ""
}
