// Package install adds the webhook side of the syncer to a configured
// syncer.Syncer: the receiver on its own port, the reconciler that gives
// each Repository its webhook path, the push-to-ChangeRequest latency
// recorder, and the preview handler with its commit-status client.
package install

import (
	"context"
	"errors"
	"fmt"
	"net"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/preview"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/status"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook"
)

// Options configure the webhook side.
type Options struct {
	// Addr is the receiver's listen address (":9292"); Listener, if set, is
	// used instead.
	Addr     string
	Listener net.Listener
	// Workers handle deliveries asynchronously; default 4.
	Workers int
	// StatusProvider (github, gitea, gitlab) turns on commit statuses and
	// review confirmation through the provider's API; empty turns both off,
	// and then no review becomes an Approval.
	StatusProvider provider.Name
	// StatusBaseURL is the provider's API root.
	StatusBaseURL string
	// StatusTokenSecret holds the API token under key "token".
	StatusTokenSecret types.NamespacedName
	// GitLabMinAccess is the lowest GitLab access level whose approvals
	// count (30 Developer, 40 Maintainer); default Developer.
	GitLabMinAccess int
	// NoReviewComments turns off the pull-request review comment (the
	// plan, manifest diff and approval state of every preview), which is
	// posted through the status provider's API when one is configured.
	NoReviewComments bool
	// CheckRuns adds a GitHub Check Run per release (needs a GitHub App
	// token with checks:write).
	CheckRuns bool
	// RegistrySecret names the Secret (namespace/name) whose "token" key
	// OCI registries send with their webhooks; empty turns registry
	// webhooks off (their paths answer 404).
	RegistrySecret types.NamespacedName
	// SkipNameValidation lets several syncers run in one process (tests).
	SkipNameValidation bool
}

// Installed is what Install added, for tests and benchmarks.
type Installed struct {
	Receiver *webhook.Receiver
	Previews *preview.Handler
	Latency  *webhook.Latency
	Metrics  *webhook.Metrics
}

// Install registers the webhook side with s's manager; it runs when s
// starts.
func Install(s *syncer.Syncer, opts Options) (*Installed, error) {
	if opts.Addr == "" && opts.Listener == nil {
		return nil, errors.New("webhook receiver: no listen address")
	}
	mgr := s.Manager
	rec := s.Reconciler
	m, err := webhook.NewMetrics(nil)
	if err != nil {
		return nil, err
	}
	h := &preview.Handler{
		Client:          mgr.GetClient(),
		APIReader:       mgr.GetAPIReader(),
		Git:             s.Git,
		Remotes:         rec,
		Validator:       rec.Validator,
		Store:           rec.Store,
		ArtifactBaseURL: s.ArtifactURL,
		ScratchDir:      rec.ScratchDir,
		Metrics:         rec.Metrics,
		Log:             ctrl.Log.WithName("previews"),
		Charts:          rec,
	}
	if opts.StatusProvider != "" {
		if opts.StatusTokenSecret.Name == "" || opts.StatusTokenSecret.Namespace == "" {
			return nil, errors.New("commit statuses need the token Secret as namespace/name")
		}
		sc := &status.SecretClient{Provider: opts.StatusProvider, BaseURL: opts.StatusBaseURL, Reader: mgr.GetAPIReader(), Secret: opts.StatusTokenSecret}
		// Check the configuration now rather than at the first pull request.
		if _, err := status.New(opts.StatusProvider, opts.StatusBaseURL, "placeholder"); err != nil {
			return nil, err
		}
		h.Statuses = sc
		reader, secret := mgr.GetAPIReader(), opts.StatusTokenSecret
		api := &provider.API{
			Provider: opts.StatusProvider,
			BaseURL:  apiBaseURL(opts.StatusProvider, opts.StatusBaseURL),
			Token: func(ctx context.Context) (string, error) {
				return status.TokenFromSecret(ctx, reader, secret, "")
			},
			GitLabMinAccess: opts.GitLabMinAccess,
		}
		h.Reviews = api
		// A rollback's revert pull request goes through the same provider.
		rec.Forge = api
		if !opts.NoReviewComments {
			h.Comments = api
			h.CheckRuns = opts.CheckRuns
			// Approvals between pushes update the comment too.
			if err := (&preview.CommentRefresher{Client: mgr.GetClient(), Handler: h, SkipNameValidation: opts.SkipNameValidation}).SetupWithManager(mgr); err != nil {
				return nil, fmt.Errorf("set up the review comment refresher: %w", err)
			}
		}
	}
	lat := &webhook.Latency{Cache: mgr.GetCache(), Metrics: m}
	r := &webhook.Receiver{
		Reader:       mgr.GetClient(),
		SecretReader: mgr.GetAPIReader(),
		Writer:       mgr.GetClient(),
		Trigger:      s.Trigger(),
		PullRequests: h,
		Pushes:       lat,
		Metrics:      m,
		Log:          ctrl.Log.WithName("webhooks"),
		Addr:         opts.Addr,
		Listener:     opts.Listener,
		Workers:      opts.Workers,
	}
	if opts.RegistrySecret.Name != "" {
		if opts.RegistrySecret.Namespace == "" {
			return nil, errors.New("registry webhooks need the token Secret as namespace/name")
		}
		r.Registry = &webhook.Registry{Reader: mgr.GetClient(), SecretReader: mgr.GetAPIReader(), Secret: opts.RegistrySecret,
			Trigger: s.Trigger(), Metrics: m, Log: ctrl.Log.WithName("registry-webhooks")}
	}
	if err := (&webhook.PathReconciler{Client: mgr.GetClient(), SkipNameValidation: opts.SkipNameValidation}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("set up webhook path reconciler: %w", err)
	}
	if err := mgr.Add(lat); err != nil {
		return nil, err
	}
	if err := mgr.Add(r); err != nil {
		return nil, err
	}
	return &Installed{Receiver: r, Previews: h, Latency: lat, Metrics: m}, nil
}

// apiBaseURL is the provider's API root: the configured one, or GitHub's
// public API.
func apiBaseURL(p provider.Name, configured string) string {
	if configured == "" && p == provider.GitHub {
		return "https://api.github.com"
	}
	return configured
}
