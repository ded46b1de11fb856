package install

import (
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
)

// BindFlags registers the webhook flags on fs, with their defaults:
// --webhook-bind-address (":9292"; "0" turns the webhook side off),
// --status-provider, --status-base-url, --status-token-secret,
// --no-review-comments, --check-runs, --gitlab-approver-access and
// --registry-webhook-secret.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Addr, "webhook-bind-address", ":9292", "Address of the webhook receiver (\"0\" turns webhooks, previews and review approvals off).")
	fs.Func("status-provider", "Post preview verdicts as commit statuses to this provider's API and confirm reviews with it: github, gitea or gitlab (default: off; then no review becomes an Approval).", func(v string) error {
		switch p := provider.Name(v); p {
		case provider.GitHub, provider.Gitea, provider.GitLab:
			o.StatusProvider = p
			return nil
		}
		return fmt.Errorf("unknown provider %q (github, gitea or gitlab)", v)
	})
	fs.BoolVar(&o.NoReviewComments, "no-review-comments", false, "Do not post the review comment (plan, manifest diff, approval state) on pull requests.")
	fs.BoolVar(&o.CheckRuns, "check-runs", false, "Also report each release as a GitHub Check Run (needs a GitHub App token with checks:write).")
	fs.IntVar(&o.GitLabMinAccess, "gitlab-approver-access", provider.GitLabDeveloper, "Lowest GitLab access level whose merge request approvals count (30 Developer, 40 Maintainer).")
	fs.StringVar(&o.StatusBaseURL, "status-base-url", "", "API root of the status provider (default for github: the public API).")
	fs.Func("status-token-secret", "Secret (namespace/name) whose \"token\" key authenticates to the status provider.", func(v string) error {
		ns, name, ok := strings.Cut(v, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("want namespace/name, got %q", v)
		}
		o.StatusTokenSecret = types.NamespacedName{Namespace: ns, Name: name}
		return nil
	})
	fs.Func("registry-webhook-secret", "Secret (namespace/name) whose \"token\" key OCI registries (distribution, Harbor) send in the Authorization header of their webhooks to /registry/distribution and /registry/harbor (default: off).", func(v string) error {
		ns, name, ok := strings.Cut(v, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("want namespace/name, got %q", v)
		}
		o.RegistrySecret = types.NamespacedName{Namespace: ns, Name: name}
		return nil
	})
}

// Enabled reports whether the webhook side is on.
func (o *Options) Enabled() bool { return o.Listener != nil || (o.Addr != "" && o.Addr != "0") }
