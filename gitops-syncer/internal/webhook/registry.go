package webhook

// Registry webhooks: an OCI registry tells the syncer that a repository
// got a new tag, so the Repositories whose charts come from there
// re-resolve their ranges now instead of at their next poll.
//
// Two senders are understood, each on its own path of the receiver:
//
//   - /registry/distribution: the CNCF distribution registry's
//     notifications (an envelope of events; a "push" event names
//     target.repository, target.tag and request.host). Configure an
//     endpoint in the registry's notifications section with the header
//     Authorization: [Bearer <token>].
//   - /registry/harbor: Harbor's webhook, default payload format (type
//     PUSH_ARTIFACT, event_data.repository.repo_full_name,
//     event_data.resources[].tag and resource_url, whose host part names
//     the registry). Set the policy's "Auth Header" to the token.
//
// Helm repositories (an index.yaml over HTTPS) send no notifications:
// charts from them are noticed on the poll only.
//
// The token is one for the whole syncer (a Secret named by the
// --registry-webhook-secret flag, key "token"), not per Repository: one
// registry serves many Repositories, and what a delivery can do is
// bounded to asking for an early poll. The payload is hostile and is
// never trusted for what it says was pushed: it only picks which
// Repositories to wake, those whose Releases take a chart from that
// registry host and repository or whose spec.chartRepositories cover it;
// they then resolve their ranges from the registry itself, as a poll does.
//
// Answers: 202 for an authenticated, well-formed delivery (whether or not
// it woke anything), 400 for a malformed one, 401 for a missing or wrong
// token (with no detail), 404 for an unknown sender, 413 past
// MaxBodyBytes.

import (
	"context"
	"crypto/subtle"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/registryhook"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// RegistryPathPrefix starts the paths of registry webhooks.
const RegistryPathPrefix = "/registry/"

// Senders of registry webhooks, the last element of their path.
const (
	RegistryDistribution = "distribution"
	RegistryHarbor       = "harbor"
)

// Registry serves registry webhooks (this file's comment says how).
type Registry struct {
	// Reader lists Repositories and Releases (the manager's cache).
	Reader client.Reader
	// SecretReader reads the token Secret at each delivery (uncached), so
	// a rotated token takes effect at once.
	SecretReader client.Reader
	// Secret names the Secret whose "token" key registries send.
	Secret  types.NamespacedName
	Trigger Trigger
	Metrics *Metrics
	Log     logr.Logger
}

// ServeHTTP authenticates a delivery, reads which repositories it says
// were pushed, and wakes the Repositories that use them.
func (g *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	sender, event := strings.TrimPrefix(req.URL.Path, RegistryPathPrefix), "push"
	reply := func(code int, result, msg string) {
		if g.Metrics != nil {
			g.Metrics.Requests.WithLabelValues(sender, event, result).Inc()
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, msg+"\n")
	}
	var parse func([]byte) ([]registryhook.Push, error)
	switch sender {
	case RegistryDistribution:
		parse = registryhook.ParseDistribution
	case RegistryHarbor:
		parse = registryhook.ParseHarbor
	default:
		sender = "unknown"
		reply(http.StatusNotFound, resultNotFound, "not found")
		return
	}
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		reply(http.StatusMethodNotAllowed, resultBadRequest, "only POST")
		return
	}
	body, ok := readBody(w, req, reply)
	if !ok {
		return
	}
	ctx := req.Context()
	if !g.authenticated(ctx, req.Header.Get("Authorization")) {
		reply(http.StatusUnauthorized, resultUnauthorized, "unauthorized")
		return
	}
	pushes, err := parse(body)
	if err != nil {
		reply(http.StatusBadRequest, resultBadRequest, err.Error())
		return
	}
	if len(pushes) == 0 {
		event = "other"
		reply(http.StatusAccepted, resultIgnored, "accepted: no pushed tag")
		return
	}
	woken, err := g.wake(ctx, pushes)
	if err != nil {
		g.Log.Error(err, "Looking up the Repositories of a registry push failed")
		reply(http.StatusServiceUnavailable, resultUnavailable, "try again later")
		return
	}
	g.Log.V(1).Info("Registry push", "sender", sender, "pushes", len(pushes), "woken", woken)
	if len(woken) == 0 {
		reply(http.StatusAccepted, resultIgnored, "accepted")
		return
	}
	reply(http.StatusAccepted, resultAccepted, "accepted")
}

// authenticated compares the Authorization header, as "Bearer <token>"
// (distribution's configured header) or the bare token (Harbor's Auth
// Header), with the Secret's token in constant time.
func (g *Registry) authenticated(ctx context.Context, header string) bool {
	s := &corev1.Secret{}
	if err := g.SecretReader.Get(ctx, g.Secret, s); err != nil {
		g.Log.Info("Registry webhook secret unavailable", "secret", g.Secret.String(), "reason", err.Error())
		return false
	}
	token := s.Data[SecretKey]
	if len(token) == 0 {
		g.Log.Info("Registry webhook secret has no token", "secret", g.Secret.String(), "key", SecretKey)
		return false
	}
	bare := subtle.ConstantTimeCompare([]byte(header), token)
	bearer := subtle.ConstantTimeCompare([]byte(header), append([]byte("Bearer "), token...))
	return bare|bearer == 1
}

// wake asks for a reconcile of every Repository a push concerns and
// returns their names.
func (g *Registry) wake(ctx context.Context, pushes []registryhook.Push) ([]string, error) {
	var repos sluicev1.RepositoryList
	if err := g.Reader.List(ctx, &repos); err != nil {
		return nil, fmt.Errorf("list repositories: %w", err)
	}
	var releases sluicev1.ReleaseList
	if err := g.Reader.List(ctx, &releases); err != nil {
		return nil, fmt.Errorf("list releases: %w", err)
	}
	byRepo := map[types.NamespacedName][]sluicev1.Release{}
	for _, rel := range releases.Items {
		if name := rel.Labels[sluicev1.LabelRepository]; name != "" {
			k := types.NamespacedName{Namespace: rel.Namespace, Name: name}
			byRepo[k] = append(byRepo[k], rel)
		}
	}
	var woken []string
	for i := range repos.Items {
		repo := &repos.Items[i]
		if repo.Spec.Suspend {
			continue
		}
		key := client.ObjectKeyFromObject(repo)
		for _, p := range pushes {
			if p.Uses(repo, byRepo[key]) {
				if !g.Trigger.Request(repo.Namespace, repo.Name) {
					g.Log.Info("Reconcile queue full; the poll will pick the registry push up", "repository", key.String())
				}
				woken = append(woken, key.String())
				break
			}
		}
	}
	return woken, nil
}
