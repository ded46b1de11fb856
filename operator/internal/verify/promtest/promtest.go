// Package promtest runs a real Prometheus (the `prometheus` binary, `make
// prometheus`) for tests: it scrapes the given targets every second, each
// labelled with its namespace, and is ready once it holds two samples of
// every target (rate and increase need two).
package promtest

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Server is a running Prometheus.
type Server struct {
	// URL is its base URL.
	URL string
	dir string
	cmd *exec.Cmd
	// exited receives the process's end.
	exited chan error
}

// Start runs Prometheus scraping targets (namespace → host:port of a
// /metrics endpoint) and waits until every target has two samples.
func Start(targets map[string]string) (*Server, error) {
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		return nil, fmt.Errorf("the tests need a real Prometheus (make prometheus): %w", err)
	}
	dir, err := os.MkdirTemp("", "promtest-")
	if err != nil {
		return nil, err
	}
	var cfg strings.Builder
	cfg.WriteString("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n")
	for ns, addr := range targets {
		fmt.Fprintf(&cfg, "  - job_name: app-%s\n    static_configs:\n      - targets: [%q]\n        labels: {namespace: %q}\n", ns, addr, ns)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg.String()), 0o600); err != nil {
		return nil, err
	}
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	logFile, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	// A file, not the test's stderr: go test waits for its pipes to
	// close. Pdeathsig: Prometheus dies with a test binary that panicked.
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{URL: "http://" + addr, dir: dir, cmd: cmd, exited: make(chan error, 1)}
	go func() { s.exited <- cmd.Wait() }()
	for {
		select {
		case err := <-s.exited:
			out, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("prometheus exited: %v: %s", err, out)
		default:
		}
		ready := true
		for ns := range targets {
			if v, err := s.Query(fmt.Sprintf(`count_over_time(up{namespace=%q}[1m])`, ns)); err != nil || v < 2 {
				ready = false
			}
		}
		if ready {
			return s, nil
		}
		// Polling a condition, not waiting for time: Prometheus scrapes
		// on its own clock.
		<-time.After(100 * time.Millisecond)
	}
}

// Stop ends Prometheus and removes its data.
func (s *Server) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	_ = os.RemoveAll(s.dir)
}

// Query is the value of an instant query that returns one sample; an
// error when it returns none or fails.
func (s *Server) Query(q string) (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/api/v1/query?query="+url.QueryEscape(q), nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return 0, fmt.Errorf("query %s: %s: %w", q, resp.Status, err)
	}
	if body.Status != "success" {
		return 0, fmt.Errorf("query %s: %s", q, body.Error)
	}
	if len(body.Data.Result) != 1 {
		return 0, fmt.Errorf("query %s: %d samples", q, len(body.Data.Result))
	}
	str, _ := body.Data.Result[0].Value[1].(string)
	var v float64
	if _, err := fmt.Sscan(str, &v); err != nil {
		return 0, fmt.Errorf("query %s: value %q: %w", q, str, err)
	}
	return v, nil
}

// freeAddr is a local address nothing listens on.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
