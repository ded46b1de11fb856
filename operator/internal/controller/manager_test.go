package controller

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/testapplier"
)

func TestCheckInternalAddr(t *testing.T) {
	for addr, ok := range map[string]bool{
		"":               true,
		"0":              true,
		"127.0.0.1:6060": true,
		"localhost:6060": true,
		"[::1]:6060":     true,
		"10.1.2.3:6060":  true,
		":6060":          false,
		"0.0.0.0:6060":   false,
		"8.8.8.8:6060":   false,
		"pprof:6060":     false,
		"garbage":        false,
	} {
		if err := CheckInternalAddr(addr); (err == nil) != ok {
			t.Errorf("CheckInternalAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func httpGet(url string) (int, string) {
	resp, err := http.Get(url) //nolint:noctx // a test probe
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestManager_electsALeaderServesProbesMetricsAndApplies(t *testing.T) {
	f := newFixture(t)
	metricsAddr, probeAddr, pprofAddr := freeAddr(t), freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	ta := &testapplier.Applier{Client: env.Client}
	mgr, err := NewManager(ctx, env.Config, ManagerOptions{
		Options:                 Options{Appliers: applier.Registry{sluicev1.DeliveryHelm: ta}, Concurrency: 2, SkipNameValidation: true},
		MetricsAddr:             metricsAddr,
		ProbeAddr:               probeAddr,
		PprofAddr:               pprofAddr,
		LeaderElection:          true,
		LeaderElectionNamespace: f.ns,
		Namespaces:              []string{f.ns},
	})
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	select {
	case <-mgr.Elected():
	case <-time.After(waitFor):
		t.Fatal("never became leader")
	}
	require.Eventually(t, func() bool {
		c1, _ := httpGet("http://" + probeAddr + "/healthz")
		c2, _ := httpGet("http://" + probeAddr + "/readyz")
		return c1 == http.StatusOK && c2 == http.StatusOK
	}, waitFor, 100*time.Millisecond)
	code, _ := httpGet("http://" + pprofAddr + "/debug/pprof/")
	require.Equal(t, http.StatusOK, code, "pprof on the internal address")

	rel := f.release("checkout", "staging", autoApprove, nil)
	cr := f.change(rel, autoApprove)
	f.phase(cr, sluicev1.PhaseApplied)
	require.Eventually(t, func() bool {
		_, body := httpGet("http://" + metricsAddr + "/metrics")
		return strings.Contains(body, `sluice_changerequests{namespace="`+f.ns+`",phase="Applied"} 1`) &&
			strings.Contains(body, `sluice_changes_applied_total{applier="test"} 1`)
	}, waitFor, 200*time.Millisecond)
}
