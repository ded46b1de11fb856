package controller_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/kit/testenv"
)

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func TestSyncer_servesProbesAndMetricsAndTakesTheLeaderLease(t *testing.T) {
	ns := newNamespace(t)
	probes, metricsAddr := freeAddr(t), freeAddr(t)
	s, err := syncer.New(env.Config, syncer.Options{
		ArtifactAddr:            "127.0.0.1:0",
		ArtifactToken:           artifact.StaticToken(testArtifactToken),
		ProbeAddr:               probes,
		MetricsAddr:             metricsAddr,
		DataDir:                 t.TempDir(),
		Namespaces:              []string{ns},
		LeaderElection:          true,
		LeaderElectionNamespace: ns,
		Validator:               validator,
		SkipNameValidation:      true,
	})
	require.NoError(t, err)
	ctx := testenv.Go(t, s).Context

	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			return 0, ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, path := range []string{"/healthz", "/readyz"} {
		require.Eventually(t, func() bool { code, _ := get("http://" + probes + path); return code == http.StatusOK }, timeout, tick, path)
	}
	require.Eventually(t, func() bool {
		lease := &coordinationv1.Lease{}
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: syncer.LeaderElectionID}, lease) == nil && lease.Spec.HolderIdentity != nil
	}, timeout, tick, "leader lease")
	code, body := get("http://" + metricsAddr + "/metrics")
	assert.Equal(t, http.StatusOK, code)
	assert.True(t, strings.Contains(body, "controller_runtime_reconcile_total") || strings.Contains(body, "workqueue"), "controller-runtime metrics are served")
}
