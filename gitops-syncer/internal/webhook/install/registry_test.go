package install_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/registry"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/install"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// distributionPush is the notification envelope the CNCF distribution
// registry sends for the manifest push of repository:tag at host.
func distributionPush(host, repository, tag string) []byte {
	return []byte(fmt.Sprintf(`{"events":[{"id":"%d","timestamp":%q,"action":"push",
"target":{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":708,"digest":"sha256:fea8895f450959fa676bcc1df0611ea93823a735a01205fd8622846041d0c7cf","repository":%q,"tag":%q},
"request":{"id":"r","addr":"127.0.0.1:40000","host":%q,"method":"PUT","useragent":"Helm/3.22.0"},"actor":{},"source":{"addr":"registry:5000","instanceID":"i"}}]}`,
		time.Now().UnixNano(), time.Now().UTC().Format(time.RFC3339Nano), repository, tag, host))
}

// TestRegistryWebhook_aPushedChartVersionInRangeIsAChangeWithoutWaitingForThePoll:
// a Repository polling hourly whose service takes chart ~1.1 from an OCI
// registry gets a ChangeRequest for a pushed 1.1.1 as soon as the
// registry's notification arrives, resolved from the registry; a
// notification with a forged token, or one claiming a tag the registry
// does not have, proposes nothing. The FIGURE compares the webhook with
// the poll (interval 20 s) for the next version.
func TestRegistryWebhook_aPushedChartVersionInRangeIsAChangeWithoutWaitingForThePoll(t *testing.T) {
	ctx := context.Background()
	// An in-memory OCI registry over TLS that counts what it is asked.
	var requests atomic.Int64
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	pusher, err := registry.NewClient(registry.ClientOptHTTPClient(srv.Client()), registry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json")))
	require.NoError(t, err)
	host := strings.TrimPrefix(srv.URL, "https://")
	pushChart := func(v string) {
		t.Helper()
		_, err := pusher.Push(chartrepotest.MarkedChart(t, v, "v"+v), host+"/charts/web:"+v)
		require.NoError(t, err)
	}
	pushChart("1.1.0")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	const token = "registry-token-of-the-e2e-test"
	w := startChartWorld(t, chartWorldOptions{Host: host, Client: srv.Client(), Listener: ln, Token: token})
	repo, crFor := w.repo, w.crFor
	hook := "http://" + ln.Addr().String() + "/registry/distribution"

	send := func(auth string, body []byte) int {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, hook, bytes.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
		req.Header.Set("Authorization", auth)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}

	// A notification claiming 1.1.9, which the registry does not have,
	// wakes the Repository, whose pass asks the registry and finds
	// nothing new.
	before := requests.Load()
	require.Equal(t, http.StatusAccepted, send("Bearer "+token, distributionPush(host, "charts/web", "1.1.9")))
	require.Eventually(t, func() bool { return requests.Load() >= before+2 }, 2*time.Minute, 20*time.Millisecond, "the woken pass resolved the range from the registry")
	require.False(t, crFor(2, "1.1.9")(), "a claimed tag is not a version")

	// 1.1.1 pushed, and a forged notification of it: nothing.
	pushChart("1.1.1")
	require.Equal(t, http.StatusUnauthorized, send("Bearer forged", distributionPush(host, "charts/web", "1.1.1")))

	// The registry's notification: a change now, not in an hour.
	start := time.Now()
	require.Equal(t, http.StatusAccepted, send("Bearer "+token, distributionPush(host, "charts/web", "1.1.1")))
	require.Eventually(t, crFor(2, "1.1.1"), 2*time.Minute, 20*time.Millisecond, "the webhook's pass resolved 1.1.1 from the registry")
	onWebhook := time.Since(start)

	// The same without a webhook, on a 20 s poll.
	// A merge patch: the syncer writes the Repository too.
	require.NoError(t, k8s.Patch(ctx, repo.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"interval":"20s"}}`))))
	require.Eventually(t, func() bool {
		got := &sluicev1.Repository{}
		return k8s.Get(ctx, client.ObjectKeyFromObject(repo), got) == nil && got.Status.ObservedGeneration == got.Generation
	}, 2*time.Minute, 50*time.Millisecond)
	pushChart("1.1.2")
	start = time.Now()
	require.Eventually(t, crFor(3, "1.1.2"), 2*time.Minute, 20*time.Millisecond, "the poll resolves 1.1.2")
	onPoll := time.Since(start)
	t.Logf("FIGURE: registry push -> ChangeRequest: %s on the distribution webhook (poll interval 1h), %s on a 20s poll without a webhook (load average %s)",
		onWebhook.Round(time.Millisecond), onPoll.Round(time.Millisecond), loadAverage())
}

// chartWorld is a syncer with the webhook side installed, the registry
// token in a Secret, and a Repository polling hourly whose web service
// takes chart ~1.1 from a registry: synced once (its first ChangeRequest
// and Release exist, the pass has ended), so only a webhook runs the next.
type chartWorld struct {
	ns   string
	head string
	repo *sluicev1.Repository
}

type chartWorldOptions struct {
	// Host serves oci://Host/charts/web; Client reaches it.
	Host   string
	Client *http.Client
	// Listener is the receiver's; Token the registry webhook's.
	Listener net.Listener
	Token    string
	// ChartRepositories and Secrets are the Repository's, if any.
	ChartRepositories []sluicev1.ChartRepository
	Secrets           []*corev1.Secret
}

func startChartWorld(t *testing.T, o chartWorldOptions) *chartWorld {
	t.Helper()
	ctx := context.Background()
	ns := env.Namespace(t, "reg-")
	g := gittest.NewRepo(t, t.TempDir(), "infra")
	g.WriteFile("services/web/service.yaml", fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {repo: "oci://%s/charts", name: web, version: "~1.1"}
environments:
  - name: staging
    namespace: web-staging
    approval: {required: 1, autoApproveRisk: low}
`, o.Host))
	w := &chartWorld{ns: ns, head: g.Commit("web from the registry", "alice@example.com")}

	s, err := syncer.New(env.Config, syncer.Options{ArtifactAddr: "127.0.0.1:0", ArtifactToken: artifact.StaticToken("artifact-token-of-the-webhook-tests"), DataDir: t.TempDir(), AllowFileURLs: true,
		Namespaces: []string{ns}, Validator: validator, SkipNameValidation: true})
	require.NoError(t, err)
	s.Reconciler.ChartOptions = chartrepo.Options{HTTPClient: o.Client, Timeout: time.Minute}
	secrets := append([]*corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "registry-token"}, Data: map[string][]byte{webhook.SecretKey: []byte(o.Token)}}}, o.Secrets...)
	for _, sec := range secrets {
		sec.Namespace = ns
		require.NoError(t, k8s.Create(ctx, sec))
	}
	_, err = install.Install(s, install.Options{Listener: o.Listener, SkipNameValidation: true, RegistrySecret: types.NamespacedName{Namespace: ns, Name: "registry-token"}})
	require.NoError(t, err)
	testenv.Go(t, s)

	w.repo = &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infra"}, Spec: sluicev1.RepositorySpec{
		URL: g.FileURL(), TargetNamespaces: []string{"web-*"}, ServiceAccountName: "deployer",
		Interval:          &metav1.Duration{Duration: time.Hour},
		ChartRepositories: o.ChartRepositories,
	}}
	require.NoError(t, k8s.Create(ctx, w.repo))
	require.Eventually(t, w.crFor(1, "1.1.0"), 2*time.Minute, 50*time.Millisecond, "the first sync at the Repository's creation")
	// The Release (the receiver finds the Repository through it) and the
	// end of the first pass.
	require.Eventually(t, func() bool {
		rel := &sluicev1.Release{}
		got := &sluicev1.Repository{}
		return k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: "web-staging"}, rel) == nil && rel.Spec.Chart.Repo != "" &&
			k8s.Get(ctx, client.ObjectKeyFromObject(w.repo), got) == nil && got.Status.LastSyncedCommit == w.head
	}, 2*time.Minute, 50*time.Millisecond)
	return w
}

// crFor reports whether ChangeRequest n of the head exists for version.
func (w *chartWorld) crFor(n int32, version string) func() bool {
	return func() bool {
		var list sluicev1.ChangeRequestList
		if err := k8s.List(context.Background(), &list, client.InNamespace(w.ns)); err != nil {
			return false
		}
		for _, cr := range list.Items {
			if cr.Name == sluicev1.ChangeRequestName("web-staging", w.head, n) && cr.Spec.Source.Chart.Version == version {
				return true
			}
		}
		return false
	}
}

// loadAverage is the machine's 1-minute load average, for figures.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Fields(string(b))[0]
}
