package webhook_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const (
	registryToken = "registry-token-of-the-test"
	registryHost  = "registry.example.com:5000"
)

// registryPayload reads a testdata payload naming host and repository
// instead of the file's.
func registryPayload(t testing.TB, file, host, repository string) []byte {
	t.Helper()
	b, err := os.ReadFile("registryhook/testdata/" + file)
	require.NoError(t, err)
	s := strings.ReplaceAll(string(b), registryHost, host)
	return []byte(strings.ReplaceAll(s, "charts/web", repository))
}

// chartRepository creates a Repository in ns whose Release "web-staging"
// takes chart name from chartURL (none when chartURL is empty).
func chartRepository(t *testing.T, ns, name, chartURL string, mutate ...func(*sluicev1.Repository)) {
	t.Helper()
	ctx := context.Background()
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: sluicev1.RepositorySpec{
		URL: "https://git.example.com/platform/" + name + ".git", TargetNamespaces: []string{"*"}, ServiceAccountName: "deployer",
	}}
	for _, m := range mutate {
		m(repo)
	}
	require.NoError(t, env.Client.Create(ctx, repo))
	if chartURL == "" {
		return
	}
	rel := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-web-staging", Labels: map[string]string{sluicev1.LabelRepository: name}},
		Spec: sluicev1.ReleaseSpec{Repository: name, Service: "web", Environment: "staging", SourcePath: "services/web", TargetNamespace: "web-staging",
			Chart: sluicev1.ChartSource{Repo: chartURL, Name: "web", Version: "~1.1"}}}
	require.NoError(t, env.Client.Create(ctx, rel))
}

// registryReceiver is a receiver with registry webhooks on, whose token
// is in the Secret registry-token of ns.
func registryReceiver(t *testing.T, ns string, rec *recorder) *webhook.Receiver {
	t.Helper()
	require.NoError(t, env.Client.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "registry-token"},
		Data: map[string][]byte{webhook.SecretKey: []byte(registryToken)}}))
	m, err := webhook.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	return &webhook.Receiver{Reader: env.Client, SecretReader: env.Client, Trigger: rec, Metrics: m, Log: logr.Discard(),
		Registry: &webhook.Registry{Reader: env.Client, SecretReader: env.Client, Secret: types.NamespacedName{Namespace: ns, Name: "registry-token"},
			Trigger: rec, Metrics: m, Log: logr.Discard()}}
}

// post sends body to the receiver's path with the Authorization header
// auth (none when empty) and returns the answer.
func post(h http.Handler, path, auth string, body []byte) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.docker.distribution.events.v1+json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// woken is what the recorder was asked to reconcile in ns since from,
// sorted (the tests share one API server, so other tests' Repositories
// are listed too).
func woken(rec *recorder, ns string, from int) []string {
	var got []string
	for _, e := range rec.list()[from:] {
		if strings.HasPrefix(e, "reconcile "+ns+"/") {
			got = append(got, e)
		}
	}
	sort.Strings(got)
	return got
}

// TestRegistry_aPushWakesOnlyTheRepositoriesWhoseChartsComeFromThere: a
// distribution notification or a Harbor webhook naming a pushed tag wakes
// the Repositories with a Release taking a chart from that host and
// repository, or whose spec.chartRepositories cover it, and no other: not
// one taking the same chart from another registry, nor from a Helm
// repository at the same host, nor a suspended one.
func TestRegistry_aPushWakesOnlyTheRepositoriesWhoseChartsComeFromThere(t *testing.T) {
	ns := newNamespace(t)
	chartRepository(t, ns, "uses", "oci://Registry.Example.com:5000/charts")
	chartRepository(t, ns, "covers", "", func(r *sluicev1.Repository) {
		r.Spec.ChartRepositories = []sluicev1.ChartRepository{{URL: "oci://" + registryHost + "/charts/", SecretRef: &sluicev1.LocalObjectReference{Name: "creds"}}}
	})
	chartRepository(t, ns, "elsewhere", "oci://other.example.com/charts")
	chartRepository(t, ns, "helm", "https://"+registryHost+"/charts")
	chartRepository(t, ns, "sibling", "oci://"+registryHost+"/charts/team")
	chartRepository(t, ns, "suspended", "oci://"+registryHost+"/charts", func(r *sluicev1.Repository) { r.Spec.Suspend = true })
	rec := newRecorder()
	h := registryReceiver(t, ns, rec)
	want := []string{"reconcile " + ns + "/covers", "reconcile " + ns + "/uses"}

	for _, tc := range []struct{ path, file, auth string }{
		{"/registry/distribution", "distribution-push.json", "Bearer " + registryToken},
		{"/registry/harbor", "harbor-push-artifact.json", registryToken},
	} {
		t.Run(tc.path, func(t *testing.T) {
			from := len(rec.list())
			w := post(h, tc.path, tc.auth, registryPayload(t, tc.file, registryHost, "charts/web"))
			assert.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
			assert.Equal(t, want, woken(rec, ns, from))

			from = len(rec.list())
			w = post(h, tc.path, tc.auth, registryPayload(t, tc.file, registryHost, "apps/web"))
			assert.Equal(t, http.StatusAccepted, w.Code, "an unrelated repository is accepted")
			assert.Empty(t, woken(rec, ns, from), "and wakes nothing")

			from = len(rec.list())
			w = post(h, tc.path, tc.auth, registryPayload(t, tc.file, "other.example.com", "charts/web"))
			assert.Equal(t, http.StatusAccepted, w.Code)
			assert.Equal(t, []string{"reconcile " + ns + "/elsewhere"}, woken(rec, ns, from), "the same chart at another registry wakes its user only")
		})
	}
}

// TestRegistry_refusesWhatIsNotAnAuthenticatedWellFormedPush: a missing,
// forged or stale token is 401 with no detail; a malformed payload 400;
// a body past the bound 413; other senders 404; events that push no tag
// are accepted and wake nothing; without a configured Secret nothing
// authenticates.
func TestRegistry_refusesWhatIsNotAnAuthenticatedWellFormedPush(t *testing.T) {
	ns := newNamespace(t)
	chartRepository(t, ns, "uses", "oci://"+registryHost+"/charts")
	rec := newRecorder()
	h := registryReceiver(t, ns, rec)
	dist := registryPayload(t, "distribution-push.json", registryHost, "charts/web")
	harbor := registryPayload(t, "harbor-push-artifact.json", registryHost, "charts/web")
	bearer := "Bearer " + registryToken

	for _, tc := range []struct {
		name, path, auth string
		body             []byte
		code             int
		says             string
	}{
		{"no token", "/registry/distribution", "", dist, http.StatusUnauthorized, "unauthorized\n"},
		{"a forged token", "/registry/distribution", "Bearer forged", dist, http.StatusUnauthorized, "unauthorized\n"},
		{"the token with a suffix", "/registry/harbor", registryToken + "x", harbor, http.StatusUnauthorized, "unauthorized\n"},
		{"the token as another scheme", "/registry/harbor", "Basic " + registryToken, harbor, http.StatusUnauthorized, "unauthorized\n"},
		{"a forged token with a malformed body", "/registry/distribution", "Bearer forged", []byte("{"), http.StatusUnauthorized, "unauthorized\n"},
		{"not JSON", "/registry/distribution", bearer, []byte("push charts/web"), http.StatusBadRequest, "invalid JSON"},
		{"an envelope without events", "/registry/distribution", bearer, []byte(`{"type":"PUSH_ARTIFACT"}`), http.StatusBadRequest, "no events"},
		{"events of the wrong type", "/registry/distribution", bearer, []byte(`{"events":{"action":"push"}}`), http.StatusBadRequest, "wrong type"},
		{"a repository that is no OCI name", "/registry/distribution", bearer, registryPayload(t, "distribution-push.json", registryHost, "../charts/web"), http.StatusBadRequest, "not an OCI repository name"},
		{"a host that is a URL", "/registry/distribution", bearer, registryPayload(t, "distribution-push.json", "https://x/", "charts/web"), http.StatusBadRequest, "not a host"},
		{"a Harbor payload without event_data", "/registry/harbor", registryToken, []byte(`{"type":"PUSH_ARTIFACT"}`), http.StatusBadRequest, "no type or event_data"},
		{"a Harbor resource of another repository", "/registry/harbor", registryToken,
			[]byte(strings.Replace(string(harbor), registryHost+"/charts/web:", registryHost+"/charts/webx:", 1)), http.StatusBadRequest, "does not name repository"},
		{"a body past the bound", "/registry/distribution", bearer, bytes.Repeat([]byte(" "), webhook.MaxBodyBytes+1), http.StatusRequestEntityTooLarge, "too large"},
		{"an unknown sender", "/registry/quay", bearer, dist, http.StatusNotFound, "not found"},
		{"pulls only", "/registry/distribution", bearer, []byte(strings.ReplaceAll(string(dist), `"push"`, `"pull"`)), http.StatusAccepted, "no pushed tag"},
		{"a Harbor scan event", "/registry/harbor", registryToken, []byte(strings.Replace(string(harbor), "PUSH_ARTIFACT", "SCANNING_COMPLETED", 1)), http.StatusAccepted, "no pushed tag"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from := len(rec.list())
			w := post(h, tc.path, tc.auth, tc.body)
			assert.Equal(t, tc.code, w.Code, w.Body.String())
			assert.Contains(t, w.Body.String(), tc.says)
			assert.NotContains(t, w.Body.String(), registryToken)
			assert.Empty(t, woken(rec, ns, from), "nothing woken")
		})
	}

	// GET is not a delivery.
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/registry/distribution", nil))
	assert.Equal(t, http.StatusMethodNotAllowed, w.Code)

	// A rotated token takes effect at the next delivery.
	secret := &corev1.Secret{}
	require.NoError(t, env.Client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "registry-token"}, secret))
	secret.Data[webhook.SecretKey] = []byte("rotated-registry-token")
	require.NoError(t, env.Client.Update(context.Background(), secret))
	assert.Equal(t, http.StatusUnauthorized, post(h, "/registry/distribution", bearer, dist).Code, "the old token")
	from := len(rec.list())
	assert.Equal(t, http.StatusAccepted, post(h, "/registry/distribution", "Bearer rotated-registry-token", dist).Code)
	assert.Equal(t, []string{"reconcile " + ns + "/uses"}, woken(rec, ns, from))

	// The Secret gone: nothing authenticates.
	require.NoError(t, env.Client.Delete(context.Background(), secret))
	assert.Equal(t, http.StatusUnauthorized, post(h, "/registry/distribution", "Bearer rotated-registry-token", dist).Code)

	// Registry webhooks off: their paths are unknown.
	off := &webhook.Receiver{Reader: env.Client, SecretReader: env.Client, Trigger: rec, Log: logr.Discard()}
	assert.Equal(t, http.StatusNotFound, post(off, "/registry/distribution", bearer, dist).Code)
}
