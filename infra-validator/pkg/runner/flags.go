package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// LocalName is the --terraform-runner value of the local child runner.
const LocalName = "local"

// FromFlag returns the runner a --terraform-runner value names: "local"
// (or "") is local, anything else is the URL of a runner workload, whose
// token is read from tokenFile. It logs how runs will be confined, loudly
// when Landlock is missing.
func FromFlag(value, tokenFile string, local *Local, log logr.Logger) (terraform.Runner, error) {
	if value == "" || value == LocalName {
		sb, err := local.Check()
		if err != nil {
			return nil, err
		}
		if sb.LandlockABI == 0 {
			log.Info("WARNING: terraform runs are NOT confined by Landlock; only their empty environment and own folder separate them from this process", "reason", sb.Note)
		} else {
			log.Info("Terraform runs in a local sandboxed child", "sandbox", sb.String())
		}
		LogGaps(log, sb)
		return local, nil
	}
	if tokenFile == "" {
		return nil, errors.New("--terraform-runner is a URL: --terraform-runner-token-file is required")
	}
	b, err := os.ReadFile(tokenFile)
	if err != nil {
		return nil, fmt.Errorf("--terraform-runner-token-file: %w", err)
	}
	r, err := NewRemote(value, strings.TrimSpace(string(b)))
	if err != nil {
		return nil, err
	}
	log.Info("Terraform runs in the runner workload", "url", r.URL)
	return r, nil
}

// Serve listens on addr and serves h until ctx ends; it returns the
// address it listens on (addr may end in :0).
func Serve(ctx context.Context, addr string, h http.Handler) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	return ln.Addr(), nil
}

// BaseURL is base, or http://127.0.0.1:<port of addr> when base is "".
func BaseURL(base string, addr net.Addr) string {
	if base != "" {
		return base
	}
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return "http://" + addr.String()
	}
	return "http://127.0.0.1:" + port
}

// Handler is an http.Handler set once after its server listens (for a
// server whose base URL depends on the port it got); until then it
// answers 503.
type Handler struct {
	mu sync.RWMutex
	h  http.Handler
}

// Set installs the real handler.
func (l *Handler) Set(h http.Handler) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.h = h
}

// ServeHTTP implements http.Handler.
func (l *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.RLock()
	h := l.h
	l.mu.RUnlock()
	if h == nil {
		http.Error(w, "starting", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// Flags are the --terraform-* flags the syncer and the operator share.
type Flags struct {
	// Runner is --terraform-runner, TokenFile its token file.
	Runner, TokenFile string
	// TerraformPath and PluginCacheDir configure the local runner.
	TerraformPath, PluginCacheDir string
	// AllowPorts is --terraform-allow-ports, PassEnv --terraform-env.
	AllowPorts, PassEnv string
	// Spare keeps one local child started ahead (Local.Spare).
	Spare bool
}

// Build returns the runner the flags name and the environment passed to
// terraform: the variables --terraform-env names that are set in this
// process (a name that is not set is logged, never an error).
func (f Flags) Build(log logr.Logger) (terraform.Runner, map[string]string, error) {
	env := map[string]string{}
	for _, name := range strings.Split(f.PassEnv, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if v, ok := os.LookupEnv(name); ok {
			env[name] = v
		} else {
			log.Info("--terraform-env names a variable that is not set", "name", name)
		}
	}
	ports, err := ParsePorts(f.AllowPorts)
	if err != nil {
		return nil, nil, fmt.Errorf("--terraform-allow-ports: %w", err)
	}
	run, err := FromFlag(f.Runner, f.TokenFile, &Local{
		TerraformPath: f.TerraformPath, PluginCacheDir: f.PluginCacheDir, AllowPorts: ports, Log: log, Spare: f.Spare,
	}, log)
	if err != nil {
		return nil, nil, err
	}
	return run, env, nil
}

// LogGaps logs, one line each, what the kernel or this process's
// privileges leave unconfined in a run (Sandbox.Gaps); a runner workload
// in a cluster makes up for them with its NetworkPolicy and its own pod.
func LogGaps(log logr.Logger, sb Sandbox) {
	for _, g := range sb.Gaps() {
		log.Info("WARNING: terraform runs cannot be fully confined here: "+g, "sandbox", sb.String())
	}
}
