// Package webhook is the syncer's webhook receiver: an HTTP server on its
// own port where each Repository has its own path (status.webhookPath,
// derived from a random token) and its own secret (spec.webhookSecretRef).
// The secret is chosen by the path, never by the unverified body. A
// verified delivery is answered 202 at once and handled asynchronously: a
// push of the tracked ref asks for an immediate reconcile; pull-request and
// review events go to the preview handler.
//
// Setting up a hook: the URL is the receiver's address followed by the
// Repository's status.webhookPath (kubectl get repo NAME -o
// jsonpath='{.status.webhookPath}'); the secret is the "token" key of the
// Secret named by spec.webhookSecretRef; the content type is JSON.
//
//   - GitHub: events push, pull_request and pull_request_review; the secret
//     signs X-Hub-Signature-256.
//   - Gitea: events push, pull request and pull request reviews; the secret
//     signs X-Gitea-Signature.
//   - GitLab: push and merge request events; the secret is sent as
//     X-Gitlab-Token. Approvals and unapprovals of a merge request act as
//     approving and dismissed reviews.
//
// A review counts only when the provider's API confirms it (the commit
// status provider and token, provider.API): payloads are claims.
//   - Anything else: POST {"ref": "refs/heads/main", "after": "<sha>"} with
//     X-Sluice-Event: push, a unique X-Sluice-Delivery, and
//     X-Sluice-Signature-256: sha256=<hex HMAC-SHA256 of the body>.
//
// Answers: 202 accepted (the work runs asynchronously), 200 for a ping,
// an ignored event (another branch, previews off) or a duplicate delivery,
// 401 for a missing or wrong signature, 404 for an unknown path, 413 past
// 3 MiB, 503 when the queue is full (the provider retries).
//
// OCI registries (CNCF distribution, Harbor) notify pushed tags under
// /registry/ with a syncer-wide token (registry.go): the Repositories
// whose charts come from the pushed repository re-resolve at once.
package webhook

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Limits of the receiver.
const (
	// MaxBodyBytes is the largest delivery accepted; larger ones get 413.
	MaxBodyBytes = 3 << 20
	// SecretKey is the key of the webhook Secret holding the token.
	SecretKey = "token"
	// PathPrefix starts every Repository's webhook path.
	PathPrefix = "/hook/"
)

// Trigger asks for an immediate reconcile of one Repository (the syncer's
// controller.Trigger).
type Trigger interface {
	Request(namespace, name string) bool
}

// TracedTrigger is a Trigger that hands the delivery's trace on to the
// sync it causes (controller.Trigger is one).
type TracedTrigger interface {
	RequestTraced(namespace, name, traceparent string) bool
}

// PullRequestHandler builds previews and records reviews (the preview
// package). Each call gets a fresh copy of the Repository.
type PullRequestHandler interface {
	PullRequest(ctx context.Context, repo *sluicev1.Repository, ev *provider.Event) error
	Review(ctx context.Context, repo *sluicev1.Repository, ev *provider.Event) error
}

// PushObserver is told about every verified push of a tracked ref (the
// latency recorder).
type PushObserver interface {
	Pushed(repo types.NamespacedName, commit string, at time.Time)
}

// Receiver serves webhook deliveries.
type Receiver struct {
	// Reader lists Repositories (the manager's cache).
	Reader client.Reader
	// SecretReader reads webhook Secrets (uncached, so no Secret watch is
	// needed) and the Repository whose status.pushes recordPush appends to.
	SecretReader client.Reader
	// Writer records verified pushers in a Repository's status.pushes;
	// nil records none.
	Writer  client.Client
	Trigger Trigger
	// PullRequests may be nil: pull-request and review events are then
	// ignored.
	PullRequests PullRequestHandler
	// Registry serves registry webhooks under RegistryPathPrefix; nil
	// answers them 404.
	Registry http.Handler
	Pushes   PushObserver
	Metrics  *Metrics
	Log      logr.Logger
	// Addr is the listen address of Start, e.g. ":9292"; Listener, if
	// set, is used instead (tests and benchmarks listen on port 0).
	Addr     string
	Listener net.Listener
	// Workers handle queued deliveries; default 4. QueueSize bounds the
	// queue; a full queue answers 503 so the provider retries. Default 256.
	Workers   int
	QueueSize int
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// RetryWait is the first wait before retrying failed pull-request or
	// review work (then 4x, 3 attempts in all); default 1s.
	RetryWait time.Duration

	once  sync.Once
	seen  *deliveries
	queue chan job
	wg    sync.WaitGroup
}

type job struct {
	repo  types.NamespacedName
	event *provider.Event
	at    time.Time
	// dedupKey is forgotten again when the job fails before any effect.
	dedupKey string
	// parent is the traceparent the delivery came with, if any.
	parent string
}

func (r *Receiver) init() {
	r.once.Do(func() {
		if r.Now == nil {
			r.Now = time.Now
		}
		if r.Workers <= 0 {
			r.Workers = 4
		}
		if r.QueueSize <= 0 {
			r.QueueSize = 256
		}
		if r.RetryWait <= 0 {
			r.RetryWait = time.Second
		}
		if r.Metrics == nil {
			// A clash is left to the caller who passes Metrics; these
			// count whether or not the registry took them.
			r.Metrics, _ = NewMetrics(nil)
		}
		r.seen = newDeliveries(10000, 24*time.Hour, r.Now)
		r.queue = make(chan job, r.QueueSize)
	})
}

// Run starts the workers and blocks until ctx ends, then waits for the
// jobs in hand. Tests that serve Receiver with httptest call it directly.
func (r *Receiver) Run(ctx context.Context) {
	r.init()
	for i := 0; i < r.Workers; i++ {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case j := <-r.queue:
					r.handle(ctx, j)
				}
			}
		}()
	}
	<-ctx.Done()
	r.wg.Wait()
}

// Start serves on Addr until ctx ends (a controller-runtime Runnable). The
// server has header, read and write timeouts, so slow clients cannot hold
// connections.
func (r *Receiver) Start(ctx context.Context) error {
	r.init()
	ln := r.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", r.Addr); err != nil {
			return fmt.Errorf("webhook receiver: listen on %s: %w", r.Addr, err)
		}
	}
	srv := NewServer(r)
	go r.Run(ctx)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	r.Log.Info("Webhook receiver listening", "addr", ln.Addr().String())
	select {
	case <-ctx.Done():
		shutdown, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return srv.Shutdown(shutdown)
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return fmt.Errorf("webhook receiver: %w", err)
	}
}

// NeedLeaderElection: only the leader's controller acts on triggers, so
// only the leader receives.
func (r *Receiver) NeedLeaderElection() bool { return true }

// NewServer wraps h in an http.Server with the receiver's timeouts.
func NewServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}

// Result labels of the requests metric.
const (
	resultAccepted     = "accepted"
	resultIgnored      = "ignored"
	resultDuplicate    = "duplicate"
	resultUnauthorized = "unauthorized"
	resultTooLarge     = "too_large"
	resultBadRequest   = "bad_request"
	resultNotFound     = "not_found"
	resultUnavailable  = "unavailable"
)

// ServeHTTP checks a delivery and queues its work.
func (r *Receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.init()
	prov, event := "unknown", "unknown"
	reply := func(code int, result, msg string) {
		r.Metrics.Requests.WithLabelValues(prov, event, result).Inc()
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, msg+"\n")
	}
	if strings.HasPrefix(req.URL.Path, RegistryPathPrefix) && r.Registry != nil {
		r.Registry.ServeHTTP(w, req)
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(http.StatusMethodNotAllowed, resultBadRequest, "only POST")
		return
	}
	if !strings.HasPrefix(req.URL.Path, PathPrefix) {
		reply(http.StatusNotFound, resultNotFound, "not found")
		return
	}
	p, err := provider.Detect(req.Header)
	if err != nil {
		reply(http.StatusBadRequest, resultBadRequest, err.Error())
		return
	}
	prov = string(p)
	body, ok := readBody(w, req, reply)
	if !ok {
		return
	}

	ctx := req.Context()
	repo, err := r.repositoryFor(ctx, req.URL.Path)
	if err != nil {
		r.Log.Error(err, "Looking up the webhook path failed")
		reply(http.StatusServiceUnavailable, resultUnavailable, "try again later")
		return
	}
	if repo == nil {
		reply(http.StatusNotFound, resultNotFound, "not found")
		return
	}
	secret, err := r.secretFor(ctx, repo)
	if err != nil {
		// Not the sender's fault, but nothing can be verified: refuse the
		// same way as a bad signature and say why in the log only.
		r.Log.Info("Webhook secret unavailable", "repository", client.ObjectKeyFromObject(repo).String(), "reason", err.Error())
		reply(http.StatusUnauthorized, resultUnauthorized, "signature missing or invalid")
		return
	}
	if err := provider.Verify(p, req.Header, body, secret); err != nil {
		reply(http.StatusUnauthorized, resultUnauthorized, "signature missing or invalid")
		return
	}
	ev, err := provider.Parse(p, req.Header, body)
	if err != nil {
		reply(http.StatusBadRequest, resultBadRequest, err.Error())
		return
	}
	event = string(ev.Kind)

	key := client.ObjectKeyFromObject(repo)
	id := ev.DeliveryID
	if id == "" {
		sum := sha256.Sum256(body)
		id = "body:" + hex.EncodeToString(sum[:])
	}
	dedupKey := key.String() + "\x00" + string(p) + "\x00" + id
	if !r.seen.firstTime(dedupKey) {
		reply(http.StatusOK, resultDuplicate, "duplicate delivery ignored")
		return
	}
	if why := r.ignoreReason(repo, ev); why != "" {
		reply(http.StatusOK, resultIgnored, "ignored: "+why)
		return
	}
	select {
	case r.queue <- job{repo: key, event: ev, at: r.Now(), dedupKey: dedupKey,
		parent: tracing.Inject(tracing.ExtractHeaders(req.Context(), propagation.HeaderCarrier(req.Header)))}:
		reply(http.StatusAccepted, resultAccepted, "accepted")
	default:
		r.seen.forget(dedupKey)
		reply(http.StatusServiceUnavailable, resultUnavailable, "busy, try again later")
	}
}

var tracer = tracing.Tracer("gitops-syncer/webhook")

// readBody reads the request body, at most MaxBodyBytes. When it cannot,
// it answers through reply (413 for a body over the limit, 400 otherwise)
// and returns false.
func readBody(w http.ResponseWriter, req *http.Request, reply func(code int, result, msg string)) ([]byte, bool) {
	if req.ContentLength > MaxBodyBytes {
		reply(http.StatusRequestEntityTooLarge, resultTooLarge, "body too large")
		return nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			reply(http.StatusRequestEntityTooLarge, resultTooLarge, "body too large")
		} else {
			reply(http.StatusBadRequest, resultBadRequest, "could not read the body")
		}
		return nil, false
	}
	return body, true
}

// repositoryFor finds the Repository whose status.webhookPath is path.
func (r *Receiver) repositoryFor(ctx context.Context, path string) (*sluicev1.Repository, error) {
	var list sluicev1.RepositoryList
	if err := r.Reader.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list repositories: %w", err)
	}
	// The path is a secret of sorts: compare it in constant time with every
	// Repository's, so the time taken says nothing about near misses.
	var found *sluicev1.Repository
	for i := range list.Items {
		p := list.Items[i].Status.WebhookPath
		if p != "" && subtle.ConstantTimeCompare([]byte(p), []byte(path)) == 1 {
			found = &list.Items[i]
		}
	}
	return found, nil
}

// secretFor reads the Repository's webhook secret.
func (r *Receiver) secretFor(ctx context.Context, repo *sluicev1.Repository) ([]byte, error) {
	if repo.Spec.WebhookSecretRef == nil {
		return nil, errors.New("spec.webhookSecretRef is not set")
	}
	s := &corev1.Secret{}
	if err := r.SecretReader.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: repo.Spec.WebhookSecretRef.Name}, s); err != nil {
		return nil, fmt.Errorf("read secret %q: %w", repo.Spec.WebhookSecretRef.Name, err)
	}
	token := s.Data[SecretKey]
	if len(token) == 0 {
		return nil, fmt.Errorf("secret %q has no %q key", repo.Spec.WebhookSecretRef.Name, SecretKey)
	}
	return token, nil
}

// ignoreReason says why a verified event needs no work, or "".
func (r *Receiver) ignoreReason(repo *sluicev1.Repository, ev *provider.Event) string {
	tracked := repo.TrackedRef()
	switch ev.Kind {
	case provider.KindPush:
		if ev.Push.Ref != tracked {
			return fmt.Sprintf("%s is not the tracked ref", ev.Push.Ref)
		}
		if ev.Push.Deleted {
			return "the tracked ref was deleted; the poll reports it"
		}
		return ""
	case provider.KindPullRequest, provider.KindReview:
		pr := ev.PullRequest
		if ev.Kind == provider.KindReview {
			pr = &ev.Review.PullRequest
		}
		if r.PullRequests == nil {
			return "pull requests are not handled by this syncer"
		}
		if pr.BaseRef != tracked {
			return fmt.Sprintf("the pull request targets %s, not the tracked ref", pr.BaseRef)
		}
		if repo.Spec.Previews == sluicev1.PreviewsNone {
			return "previews are off for this repository"
		}
		if ev.Kind == provider.KindPullRequest && pr.Action == provider.PROther {
			return "no preview work for this action"
		}
		return ""
	case provider.KindPing:
		return "ping"
	}
	return "event not used"
}

// handle does the work of one verified delivery.
func (r *Receiver) handle(ctx context.Context, j job) {
	// One span per delivery, continuing the sender's trace when it sent
	// one; a push hands it on to the sync it causes.
	ctx, span := tracer.Start(tracing.Extract(ctx, j.parent), "sluice.webhook", trace.WithAttributes(
		attribute.String("sluice.repository", j.repo.String()), attribute.String("sluice.webhook.provider", string(j.event.Provider)),
		attribute.String("sluice.webhook.event", j.event.Type), attribute.String("sluice.webhook.delivery", j.event.DeliveryID)))
	defer span.End()
	log := r.Log.WithValues("repository", j.repo.String(), "provider", j.event.Provider, "event", j.event.Type, "delivery", j.event.DeliveryID, "traceID", tracing.TraceID(ctx))
	repo := &sluicev1.Repository{}
	if err := r.Reader.Get(ctx, j.repo, repo); err != nil {
		log.Error(err, "Reading the Repository for a webhook failed")
		r.seen.forget(j.dedupKey)
		return
	}
	switch j.event.Kind {
	case provider.KindPush:
		if r.Pushes != nil {
			r.Pushes.Pushed(j.repo, j.event.Push.After, j.at)
		}
		// Before the sync it triggers, so its change finds the pusher.
		if err := r.recordPush(ctx, j.repo, repo, j.event.Push, j.at); err != nil {
			log.Error(err, "Recording the pusher of a push failed; its change lists the commit e-mails only")
		}
		requested := false
		if tt, ok := r.Trigger.(TracedTrigger); ok {
			requested = tt.RequestTraced(j.repo.Namespace, j.repo.Name, tracing.Inject(ctx))
		} else {
			requested = r.Trigger.Request(j.repo.Namespace, j.repo.Name)
		}
		if !requested {
			log.Info("Reconcile queue full; the poll will pick the push up")
		}
		return
	}
	// Pull requests and reviews have no poll behind them: retry a failure
	// (a Terraform state lock held by a sync, an API hiccup) a few times,
	// each attempt idempotent.
	var err error
	for attempt, wait := 1, r.RetryWait; ; attempt, wait = attempt+1, wait*4 {
		switch j.event.Kind {
		case provider.KindPullRequest:
			err = r.PullRequests.PullRequest(ctx, repo.DeepCopy(), j.event)
		case provider.KindReview:
			err = r.PullRequests.Review(ctx, repo.DeepCopy(), j.event)
		}
		if err == nil || attempt == 3 {
			break
		}
		log.Info("Handling a webhook failed; retrying", "attempt", attempt, "error", err.Error())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	if err != nil {
		// Let a redelivery of the same event try again.
		r.seen.forget(j.dedupKey)
		log.Error(err, "Handling a webhook failed")
	}
}
