package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{}, func(e *testenv.Env) error { env = e; return nil })
}

// recorder stands in for the controller's trigger and the preview handler
// and records what the receiver asked for, in order.
type recorder struct {
	mu     sync.Mutex
	events []string
	done   chan string
}

func newRecorder() *recorder { return &recorder{done: make(chan string, 100)} }

func (r *recorder) add(s string) {
	r.mu.Lock()
	r.events = append(r.events, s)
	r.mu.Unlock()
	r.done <- s
}

func (r *recorder) Request(ns, name string) bool { r.add("reconcile " + ns + "/" + name); return true }

func (r *recorder) PullRequest(_ context.Context, repo *sluicev1.Repository, ev *provider.Event) error {
	r.add(fmt.Sprintf("pr %s #%d %s", repo.Name, ev.PullRequest.Number, ev.PullRequest.Action))
	return nil
}

func (r *recorder) Review(_ context.Context, repo *sluicev1.Repository, ev *provider.Event) error {
	r.add(fmt.Sprintf("review %s #%d %s", repo.Name, ev.Review.PullRequest.Number, ev.Review.State))
	return nil
}

func (r *recorder) list() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string{}, r.events...)
}

type repoFixture struct {
	repo   *sluicev1.Repository
	secret []byte
}

// newRepository creates a Repository tracking main with a webhook Secret
// and lets the PathReconciler give it a path.
func newRepository(t *testing.T, ns, name string) repoFixture {
	ctx := context.Background()
	secret := []byte("secret-of-" + name)
	require.NoError(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-webhook"},
		Data: map[string][]byte{webhook.SecretKey: secret}}))
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: sluicev1.RepositorySpec{
		URL: "https://git.example.com/platform/" + name + ".git", TargetNamespaces: []string{"*"}, ServiceAccountName: "deployer",
		WebhookSecretRef: &sluicev1.LocalObjectReference{Name: name + "-webhook"},
	}}
	require.NoError(t, env.Client.Create(ctx, repo))
	pr := &webhook.PathReconciler{Client: env.Client}
	_, err := pr.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(repo)})
	require.NoError(t, err)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(repo), repo))
	require.True(t, strings.HasPrefix(repo.Status.WebhookPath, webhook.PathPrefix))
	return repoFixture{repo: repo, secret: secret}
}

func newNamespace(t *testing.T) string { return env.Namespace(t, "wh-") }

const sha1 = "0123456789abcdef0123456789abcdef01234567"

// delivery is one provider's signed push of a branch.
type delivery struct {
	provider provider.Name
	event    string
	push     func(t *testing.T, ref string) []byte
}

var deliveries = []delivery{
	{provider.GitHub, "push", func(t *testing.T, ref string) []byte {
		return providertest.Edit(t, providertest.Payload(t, "github/push.payload.json"), func(m map[string]any) {
			m["ref"], m["after"], m["deleted"] = ref, sha1, false
		})
	}},
	{provider.Gitea, "push", func(t *testing.T, ref string) []byte {
		return providertest.Edit(t, providertest.Payload(t, "gitea/push.json"), func(m map[string]any) { m["ref"], m["after"] = ref, sha1 })
	}},
	{provider.GitLab, "Push Hook", func(t *testing.T, ref string) []byte {
		return providertest.Edit(t, providertest.Payload(t, "gitlab/push.json"), func(m map[string]any) { m["ref"], m["after"] = ref, sha1 })
	}},
	{provider.Generic, "push", func(t *testing.T, ref string) []byte {
		return []byte(fmt.Sprintf(`{"ref":%q,"after":%q}`, ref, sha1))
	}},
}

var deliveryCounter int

// request builds a delivery of p with the event header, a fresh delivery
// id and, when secret is not nil, the provider's signature.
func request(p provider.Name, event, path string, body, secret []byte) *http.Request {
	deliveryCounter++
	req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	id := fmt.Sprintf("delivery-%d", deliveryCounter)
	switch p {
	case provider.GitHub:
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", id)
	case provider.Gitea:
		req.Header.Set("X-GitHub-Event", event) // Gitea sends both
		req.Header.Set("X-Gitea-Event", event)
		req.Header.Set("X-Gitea-Delivery", id)
	case provider.GitLab:
		req.Header.Set("X-Gitlab-Event", event)
		req.Header.Set("X-Gitlab-Event-UUID", id)
	case provider.Generic:
		req.Header.Set(provider.HeaderGenericEvent, event)
		req.Header.Set(provider.HeaderGenericDelivery, id)
	}
	if secret != nil {
		name, value := provider.Sign(p, body, secret)
		req.Header.Set(name, value)
	}
	return req
}

func serve(h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// newMetrics returns receiver metrics registered with a registry of their
// own.
func newMetrics(t *testing.T) *webhook.Metrics {
	m, err := webhook.NewMetrics(prometheus.NewRegistry())
	require.NoError(t, err)
	return m
}

// startReceiver runs a receiver with one worker, so work is done in order.
func startReceiver(t *testing.T, rec *recorder) (*webhook.Receiver, *webhook.Metrics) {
	m := newMetrics(t)
	r := &webhook.Receiver{Reader: env.Client, SecretReader: env.Client, Trigger: rec, PullRequests: rec, Metrics: m, Log: logr.Discard(), Workers: 1}
	runReceiver(t, r)
	return r, m
}

// runReceiver runs r's workers until the test ends.
func runReceiver(t *testing.T, r *webhook.Receiver) {
	testenv.Go(t, testenv.RunnableFunc(func(ctx context.Context) error { r.Run(ctx); return nil }))
}

func TestReceiver_pushesOfEveryProvider(t *testing.T) {
	ns := newNamespace(t)
	a := newRepository(t, ns, "infra-a")
	b := newRepository(t, ns, "infra-b")
	require.NotEqual(t, a.repo.Status.WebhookPath, b.repo.Status.WebhookPath, "each Repository has its own path")

	for _, d := range deliveries {
		t.Run(string(d.provider), func(t *testing.T) {
			rec := newRecorder()
			r, m := startReceiver(t, rec)
			path := a.repo.Status.WebhookPath
			body := d.push(t, "refs/heads/main")

			// A forged or missing signature is 401 and changes nothing.
			w := serve(r, request(d.provider, d.event, path, body, []byte("not-the-secret")))
			assert.Equal(t, http.StatusUnauthorized, w.Code, "forged")
			w = serve(r, request(d.provider, d.event, path, body, nil))
			assert.Equal(t, http.StatusUnauthorized, w.Code, "missing")
			assert.NotContains(t, w.Body.String(), string(a.secret))

			// A body signed for another Repository fails on this path.
			w = serve(r, request(d.provider, d.event, b.repo.Status.WebhookPath, body, a.secret))
			assert.Equal(t, http.StatusUnauthorized, w.Code, "another repository's path")

			// Oversize is 413.
			big := append(append([]byte{}, body[:len(body)-1]...), []byte(`,"pad":"`+strings.Repeat("x", webhook.MaxBodyBytes)+`"}`)...)
			w = serve(r, request(d.provider, d.event, path, big, a.secret))
			assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code, "oversize")
			// Also when the size is not announced (chunked).
			chunked := request(d.provider, d.event, path, big, a.secret)
			chunked.Body, chunked.ContentLength = io.NopCloser(io.MultiReader(bytes.NewReader(big))), -1
			w = serve(r, chunked)
			assert.Equal(t, http.StatusRequestEntityTooLarge, w.Code, "oversize, chunked")

			// A push of a branch the Repository does not track does nothing.
			w = serve(r, request(d.provider, d.event, path, d.push(t, "refs/heads/feature"), a.secret))
			assert.Equal(t, http.StatusOK, w.Code, w.Body.String())
			assert.Contains(t, w.Body.String(), "not the tracked ref")

			// A signed push of main asks for a reconcile at once.
			req := request(d.provider, d.event, path, body, a.secret)
			replay := req.Clone(context.Background())
			replay.Body = httpBody(body)
			w = serve(r, req)
			assert.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
			assert.Equal(t, "reconcile "+ns+"/infra-a", <-rec.done)

			// A replayed delivery does nothing.
			w = serve(r, replay)
			assert.Equal(t, http.StatusOK, w.Code)
			assert.Contains(t, w.Body.String(), "duplicate")

			// A later push (a fresh delivery) goes through; nothing else
			// happened in between.
			w = serve(r, request(d.provider, d.event, path, body, a.secret))
			assert.Equal(t, http.StatusAccepted, w.Code)
			<-rec.done
			assert.Equal(t, []string{"reconcile " + ns + "/infra-a", "reconcile " + ns + "/infra-a"}, rec.list())

			p := string(d.provider)
			assert.Equal(t, 3.0, testutil.ToFloat64(m.Requests.WithLabelValues(p, "unknown", "unauthorized")))
			assert.Equal(t, 2.0, testutil.ToFloat64(m.Requests.WithLabelValues(p, "unknown", "too_large")))
			assert.Equal(t, 1.0, testutil.ToFloat64(m.Requests.WithLabelValues(p, "push", "ignored")))
			assert.Equal(t, 1.0, testutil.ToFloat64(m.Requests.WithLabelValues(p, "push", "duplicate")))
			assert.Equal(t, 2.0, testutil.ToFloat64(m.Requests.WithLabelValues(p, "push", "accepted")))
		})
	}
}

func httpBody(b []byte) *readCloser { return &readCloser{bytes.NewReader(b)} }

type readCloser struct{ *bytes.Reader }

func (readCloser) Close() error { return nil }

func TestReceiver_pullRequestsAndReviewsGoToThePreviewHandler(t *testing.T) {
	ns := newNamespace(t)
	a := newRepository(t, ns, "infra")
	rec := newRecorder()
	r, _ := startReceiver(t, rec)
	path := a.repo.Status.WebhookPath
	toMain := func(m map[string]any) {
		m["pull_request"].(map[string]any)["base"].(map[string]any)["ref"] = "main"
	}

	opened := providertest.Edit(t, providertest.Payload(t, "github/pull_request.opened.payload.json"), toMain)
	w := serve(r, request(provider.GitHub, "pull_request", path, opened, a.secret))
	require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	assert.Equal(t, "pr infra #2 opened", <-rec.done)

	// The octokit example targets master, which this Repository does not track.
	w = serve(r, request(provider.GitHub, "pull_request", path, providertest.Payload(t, "github/pull_request.opened.payload.json"), a.secret))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), "targets refs/heads/master")

	review := providertest.Edit(t, providertest.Payload(t, "github/pull_request_review.dismissed.payload.json"), toMain)
	w = serve(r, request(provider.GitHub, "pull_request_review", path, review, a.secret))
	require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	assert.Equal(t, "review infra #2 dismissed", <-rec.done)

	w = serve(r, request(provider.Gitea, "pull_request_approved", path, providertest.Payload(t, "gitea/pull_request_approved.json"), a.secret))
	require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	assert.Equal(t, "review infra #3 approved", <-rec.done)

	w = serve(r, request(provider.GitLab, "Merge Request Hook", path, providertest.Payload(t, "gitlab/merge_request.merge.json"), a.secret))
	require.Equal(t, http.StatusAccepted, w.Code, w.Body.String())
	assert.Equal(t, "pr infra #1 closed", <-rec.done)

	w = serve(r, request(provider.GitHub, "ping", path, providertest.Payload(t, "github/ping.payload.json"), a.secret))
	assert.Equal(t, http.StatusOK, w.Code)

	// Previews off: pull requests are ignored.
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"previews":"none"}}`))
	require.NoError(t, env.Client.Patch(context.Background(), a.repo, patch))
	w = serve(r, request(provider.GitHub, "pull_request", path, opened, a.secret))
	assert.Equal(t, http.StatusOK, w.Code)
	assert.Contains(t, w.Body.String(), "previews are off")
}

func TestReceiver_unknownPathsAndMethods(t *testing.T) {
	ns := newNamespace(t)
	a := newRepository(t, ns, "infra")
	r, _ := startReceiver(t, newRecorder())
	body := deliveries[0].push(t, "refs/heads/main")
	w := serve(r, request(provider.GitHub, "push", webhook.PathPrefix+"0000", body, a.secret))
	assert.Equal(t, http.StatusNotFound, w.Code)
	req := httptest.NewRequest(http.MethodGet, a.repo.Status.WebhookPath, nil)
	assert.Equal(t, http.StatusMethodNotAllowed, serve(r, req).Code)
	req = httptest.NewRequest(http.MethodPost, a.repo.Status.WebhookPath, bytes.NewReader(body))
	assert.Equal(t, http.StatusBadRequest, serve(r, req).Code, "no provider headers")
}

func TestPathReconciler_keepsAPathOnceSet(t *testing.T) {
	ns := newNamespace(t)
	a := newRepository(t, ns, "infra")
	pr := &webhook.PathReconciler{Client: env.Client}
	_, err := pr.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(a.repo)})
	require.NoError(t, err)
	again := &sluicev1.Repository{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(a.repo), again))
	assert.Equal(t, a.repo.Status.WebhookPath, again.Status.WebhookPath)
	assert.Len(t, strings.TrimPrefix(again.Status.WebhookPath, webhook.PathPrefix), 64)
}

func TestNewServer_hasHeaderReadAndWriteTimeouts(t *testing.T) {
	srv := webhook.NewServer(http.NotFoundHandler())
	assert.Positive(t, srv.ReadHeaderTimeout)
	assert.Positive(t, srv.ReadTimeout)
	assert.Positive(t, srv.WriteTimeout)
	assert.Positive(t, srv.IdleTimeout)
	assert.LessOrEqual(t, srv.MaxHeaderBytes, 64<<10)
}

// flaky fails its first calls, like a Terraform state lock held by a sync.
type flaky struct {
	*recorder
	failures int
}

func (f *flaky) PullRequest(ctx context.Context, repo *sluicev1.Repository, ev *provider.Event) error {
	if f.failures > 0 {
		f.failures--
		f.add("failed")
		return fmt.Errorf("state locked")
	}
	return f.recorder.PullRequest(ctx, repo, ev)
}

func TestReceiver_retriesFailedPullRequestWork(t *testing.T) {
	ns := newNamespace(t)
	a := newRepository(t, ns, "infra")
	rec := newRecorder()
	f := &flaky{recorder: rec, failures: 2}
	r := &webhook.Receiver{Reader: env.Client, SecretReader: env.Client, Trigger: rec, PullRequests: f, Metrics: newMetrics(t),
		Log: logr.Discard(), Workers: 1, RetryWait: time.Millisecond}
	runReceiver(t, r)
	opened := providertest.Edit(t, providertest.Payload(t, "github/pull_request.opened.payload.json"), func(m map[string]any) {
		m["pull_request"].(map[string]any)["base"].(map[string]any)["ref"] = "main"
	})
	require.Equal(t, http.StatusAccepted, serve(r, request(provider.GitHub, "pull_request", a.repo.Status.WebhookPath, opened, a.secret)).Code)
	assert.Equal(t, []string{"failed", "failed", "pr infra #2 opened"}, []string{<-rec.done, <-rec.done, <-rec.done})
}
