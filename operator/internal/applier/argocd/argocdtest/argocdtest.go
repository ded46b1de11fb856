// Package argocdtest runs a real Argo CD for tests: Redis, the
// repo-server, the application controller and, when asked, the
// config-management-plugin server, against a testenv API server, each with
// private folders and loopback ports. Argo CD is built by `make argocd`
// (bin/argocd/<Version>/) and Redis comes from the machine (`make redis`).
//
// What this Argo CD lacks: there is no kubelet or controller-manager, so
// Pods never run and a Deployment stays Progressing unless a test patches
// its status; objects without health (ConfigMap, ClusterIP Service) are
// Healthy at once. There is no garbage collector either, so Applications
// must prune with background propagation.
package argocdtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/kit/testenv"
)

// Version is the Argo CD the tests run (the version the workspace's go.mod
// requires; `make argocd` builds it).
const Version = "v2.14.21"

// Plugin is a config management plugin for the cmp-server.
type Plugin struct {
	// Name is the plugin's name (its socket is "<Name>.sock").
	Name string
	// Command is the generate command, run in the checked-out source path.
	Command []string
	// Env is added to the cmp-server's environment, which generate
	// commands inherit.
	Env []string
}

// Options configure Start.
type Options struct {
	// Env is the API server Argo CD works against.
	Env *testenv.Env
	// Namespace is Argo CD's namespace; empty means "argocd".
	Namespace string
	// Plugin, when set, runs a cmp-server for it.
	Plugin *Plugin
	// Plugins run a cmp-server each, besides Plugin: a repo-server with
	// several config management plugin sidecars.
	Plugins []Plugin
}

// ArgoCD is a running Argo CD.
type ArgoCD struct {
	// Namespace is Argo CD's namespace.
	Namespace string
	dir       string
	procs     []*proc
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// ErrNotBuilt says the Argo CD binaries are missing.
var ErrNotBuilt = errors.New("argo CD is not built: run `make argocd` at the repository root (and `make redis` for redis-server)")

// BinDir finds bin/argocd/<Version> above the working directory.
func BinDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		candidate := filepath.Join(dir, "bin", "argocd", Version)
		if fi, err := os.Stat(filepath.Join(candidate, "argocd")); err == nil && fi.Mode()&0o111 != 0 {
			return candidate, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil || filepath.Dir(dir) == dir {
			return "", ErrNotBuilt
		}
	}
}

// Start starts Redis, the repo-server, the cmp-server (with a Plugin) and
// the application controller, watching Applications in every namespace,
// and installs the ConfigMaps and the Secret Argo CD reads. Stop ends them.
func Start(ctx context.Context, opts Options) (_ *ArgoCD, err error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	redis, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotBuilt, err)
	}
	if opts.Namespace == "" {
		opts.Namespace = "argocd"
	}
	dir, err := os.MkdirTemp("", "argocd-")
	if err != nil {
		return nil, err
	}
	a := &ArgoCD{Namespace: opts.Namespace, dir: dir}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, a.Logs())
			_ = a.Stop()
		}
	}()
	if err := a.install(ctx, opts.Env.Client); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := testenv.WriteKubeconfig(opts.Env.Config, kubeconfig, opts.Namespace); err != nil {
		return nil, err
	}
	for _, d := range []string{"tmp", "plugins", "redis"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	ports, err := freePorts(4)
	if err != nil {
		return nil, err
	}
	redisPort, repoPort, repoMetrics, ctrlMetrics := ports[0], ports[1], ports[2], ports[3]
	common := []string{
		"TMPDIR=" + filepath.Join(dir, "tmp"),
		"ARGOCD_GPG_ENABLED=false",
		"ARGOCD_ASK_PASS_SOCK=" + filepath.Join(dir, "askpass.sock"),
		"ARGOCD_PLUGINSOCKFILEPATH=" + filepath.Join(dir, "plugins"),
		"HOME=" + dir,
		"PATH=" + os.Getenv("PATH"),
	}
	redisAddr := "127.0.0.1:" + strconv.Itoa(redisPort)

	if err := a.run("redis", redis, nil, "--bind", "127.0.0.1", "--port", strconv.Itoa(redisPort),
		"--save", "", "--appendonly", "no", "--dir", filepath.Join(dir, "redis")); err != nil {
		return nil, err
	}
	if err := waitPort(ctx, redisAddr, a.procs[len(a.procs)-1]); err != nil {
		return nil, err
	}
	plugins := opts.Plugins
	if opts.Plugin != nil {
		plugins = append([]Plugin{*opts.Plugin}, plugins...)
	}
	for _, p := range plugins {
		if err := a.startPlugin(ctx, bin, p, common); err != nil {
			return nil, err
		}
	}
	if err := a.run("argocd-repo-server", filepath.Join(bin, "argocd-repo-server"), common,
		"--address", "127.0.0.1", "--port", strconv.Itoa(repoPort),
		"--metrics-address", "127.0.0.1", "--metrics-port", strconv.Itoa(repoMetrics),
		"--disable-tls", "--redis", redisAddr, "--loglevel", "warn"); err != nil {
		return nil, err
	}
	if err := waitPort(ctx, "127.0.0.1:"+strconv.Itoa(repoPort), a.procs[len(a.procs)-1]); err != nil {
		return nil, err
	}
	ctrlEnv := append([]string{"ARGOCD_FAKE_IN_CLUSTER=true", "KUBECONFIG=" + kubeconfig}, common...)
	if err := a.run("argocd-application-controller", filepath.Join(bin, "argocd-application-controller"), ctrlEnv,
		"--kubeconfig", kubeconfig, "--namespace", opts.Namespace, "--application-namespaces", "*",
		"--repo-server", "127.0.0.1:"+strconv.Itoa(repoPort), "--repo-server-plaintext",
		"--redis", redisAddr, "--metrics-port", strconv.Itoa(ctrlMetrics), "--loglevel", "warn"); err != nil {
		return nil, err
	}
	if err := waitPort(ctx, "127.0.0.1:"+strconv.Itoa(ctrlMetrics), a.procs[len(a.procs)-1]); err != nil {
		return nil, err
	}
	return a, nil
}

// startPlugin runs a cmp-server for p, with its own configuration folder,
// and waits for its socket.
func (a *ArgoCD) startPlugin(ctx context.Context, bin string, p Plugin, common []string) error {
	cfg, err := yaml.Marshal(map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "ConfigManagementPlugin",
		"metadata": map[string]any{"name": p.Name},
		"spec":     map[string]any{"generate": map[string]any{"command": p.Command}},
	})
	if err != nil {
		return err
	}
	dir := filepath.Join(a.dir, "cmp-"+p.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "plugin.yaml"), cfg, 0o600); err != nil {
		return err
	}
	if err := a.run("argocd-cmp-server-"+p.Name, filepath.Join(bin, "argocd-cmp-server"), append(slices.Clone(common), p.Env...),
		"--config-dir-path", dir, "--loglevel", "warn"); err != nil {
		return err
	}
	return waitFile(ctx, filepath.Join(a.dir, "plugins", p.Name+".sock"), a.procs[len(a.procs)-1])
}

// install creates Argo CD's namespace, argocd-cm, argocd-rbac-cm and
// argocd-secret (without server.secretkey its settings are incomplete).
func (a *ArgoCD) install(ctx context.Context, c client.Client) error {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Namespace: a.Namespace, Name: name, Labels: map[string]string{"app.kubernetes.io/part-of": "argocd"}}
	}
	for _, o := range []client.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: a.Namespace}},
		&corev1.ConfigMap{ObjectMeta: meta("argocd-cm")},
		&corev1.ConfigMap{ObjectMeta: meta("argocd-rbac-cm")},
		&corev1.Secret{ObjectMeta: meta("argocd-secret"), StringData: map[string]string{"server.secretkey": "test-only"}},
	} {
		if err := c.Create(ctx, o); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("install Argo CD's %T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}

func (a *ArgoCD) run(name, path string, env []string, args ...string) error {
	logPath := filepath.Join(a.dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(path, args...)
	cmd.Env = env
	cmd.Dir = a.dir
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group: Stop ends the component and anything it
	// started (the plugin's generate commands).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = f.Close(); close(p.done) }()
	a.procs = append(a.procs, p)
	return nil
}

// Stop ends every process, the ones that ignore SIGTERM (the cmp-server)
// with SIGKILL, and removes the private folder.
func (a *ArgoCD) Stop() error {
	for i := len(a.procs) - 1; i >= 0; i-- {
		p := a.procs[i]
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
		}
	}
	a.procs = nil
	return os.RemoveAll(a.dir)
}

// Logs is the tail of every component's log, for a failing test.
func (a *ArgoCD) Logs() string {
	var b strings.Builder
	for _, p := range a.procs {
		data, _ := os.ReadFile(p.log)
		if len(data) > 4000 {
			data = data[len(data)-4000:]
		}
		fmt.Fprintf(&b, "--- %s\n%s\n", p.name, bytes.TrimSpace(data))
	}
	return b.String()
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// waitPort waits until addr accepts connections or p exits.
func waitPort(ctx context.Context, addr string, p *proc) error {
	return wait(ctx, p, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	})
}

// waitFile waits until path exists or p exits.
func waitFile(ctx context.Context, path string, p *proc) error {
	return wait(ctx, p, func() bool { _, err := os.Stat(path); return err == nil })
}

func wait(ctx context.Context, p *proc, ready func() bool) error {
	deadline := time.NewTimer(2 * time.Minute)
	defer deadline.Stop()
	for !ready() {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start", p.name)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline.C:
			return fmt.Errorf("%s did not come up within 2 minutes", p.name)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
