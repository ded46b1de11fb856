// Package status reports preview verdicts back to pull requests as commit
// statuses (GitHub's statuses API, Gitea's, GitLab's), one per release,
// through the providers' Go clients (provider.API) with a configurable base
// URL and a token read from a Secret. Descriptions are built only from the verdict's result, risk and
// finding counts, never from finding messages, so no secret can reach them.
package status

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// State of a commit status, in Sluice's terms; each provider's word is
// chosen when posting.
type State string

const (
	StatePending State = "pending"
	StateSuccess State = "success"
	StateFailure State = "failure"
	StateError   State = "error"
)

// Status is one commit status.
type Status struct {
	// Repo is "owner/name" (GitHub, Gitea); ProjectID is GitLab's project.
	Repo      string
	ProjectID int64
	SHA       string
	// Context names the check ("sluice/checkout-prod").
	Context     string
	State       State
	Description string
	// TargetURL links to details; optional.
	TargetURL string
}

// Client posts commit statuses to one provider.
type Client struct {
	Provider provider.Name
	// BaseURL is the API root: "https://api.github.com" for GitHub, the
	// server's root URL for Gitea and GitLab (the API paths are added).
	BaseURL string
	// Token authenticates; it is never logged or put into an error.
	Token string
	HTTP  *http.Client
}

// TokenFromSecret reads key (default "token") from the Secret key refers to.
func TokenFromSecret(ctx context.Context, r client.Reader, key types.NamespacedName, dataKey string) (string, error) {
	if dataKey == "" {
		dataKey = "token"
	}
	s := &corev1.Secret{}
	if err := r.Get(ctx, key, s); err != nil {
		return "", fmt.Errorf("read status token secret %s: %w", key, err)
	}
	tok := strings.TrimSpace(string(s.Data[dataKey]))
	if tok == "" {
		return "", fmt.Errorf("secret %s has no %q key", key, dataKey)
	}
	return tok, nil
}

// New checks the configuration and returns a client.
func New(p provider.Name, baseURL, token string) (*Client, error) {
	if baseURL == "" && p == provider.GitHub {
		baseURL = "https://api.github.com"
	}
	u, err := url.Parse(baseURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("status API base URL %q must be an http(s) URL", baseURL)
	}
	switch p {
	case provider.GitHub, provider.Gitea, provider.GitLab:
	default:
		return nil, fmt.Errorf("no commit status API for provider %q", p)
	}
	if token == "" {
		return nil, errors.New("status API token is empty")
	}
	return &Client{Provider: p, BaseURL: strings.TrimSuffix(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: 15 * time.Second}}, nil
}

// Post creates the commit status s through the provider's Go client
// (provider.API.PostStatus).
func (c *Client) Post(ctx context.Context, s Status) error {
	if !validSHA(s.SHA) {
		return fmt.Errorf("commit status: %q is not a commit", s.SHA)
	}
	state := string(s.State)
	switch c.Provider {
	case provider.GitHub, provider.Gitea:
		owner, name, ok := strings.Cut(s.Repo, "/")
		if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
			return fmt.Errorf("commit status: repository %q is not owner/name", s.Repo)
		}
	case provider.GitLab:
		if s.State == StateFailure || s.State == StateError {
			state = "failed"
		}
	default:
		return fmt.Errorf("no commit status API for provider %q", c.Provider)
	}
	token := c.Token
	api := &provider.API{Provider: c.Provider, BaseURL: c.BaseURL, HTTP: c.HTTP, Token: func(context.Context) (string, error) { return token, nil }}
	return api.PostStatus(ctx, provider.CommitStatus{Repo: s.Repo, ProjectID: s.ProjectID, SHA: s.SHA, Context: s.Context, State: state,
		Description: oneLine(s.Description, 140), TargetURL: s.TargetURL})
}

// ForChangeRequest is the commit status of a preview ChangeRequest: context
// "sluice/<release>", success for a pass or warn verdict, failure for fail,
// and a one-line summary from the verdict's result, risk and counts.
func ForChangeRequest(cr *sluicev1.ChangeRequest) (State, string, string) {
	v := cr.Spec.Verdict
	state := StateSuccess
	if v.Result == sluicev1.VerdictFail {
		state = StateFailure
	}
	return state, "sluice/" + cr.Spec.Release, Summary(cr)
}

// Summary is a one-line summary of a ChangeRequest's verdict, made only of
// enumerated values and counts.
func Summary(cr *sluicev1.ChangeRequest) string {
	v := cr.Spec.Verdict
	counts := map[sluicev1.Severity]int{}
	for _, f := range v.Findings {
		counts[f.Severity]++
	}
	parts := []string{fmt.Sprintf("%s, risk %s", safeWord(string(v.Result)), safeWord(string(v.Risk)))}
	for _, sev := range []sluicev1.Severity{sluicev1.SeverityDeny, sluicev1.SeverityWarn, sluicev1.SeverityUnverifiable} {
		if n := counts[sev]; n > 0 {
			parts = append(parts, strconv.Itoa(n)+" "+string(sev))
		}
	}
	if n := v.FindingsTruncated; n > 0 {
		parts = append(parts, fmt.Sprintf("%d more", n))
	}
	if ps := cr.Spec.PlanSummary; ps != nil {
		parts = append(parts, fmt.Sprintf("plan +%d ~%d -%d", ps.Add, ps.Change, ps.Destroy))
	}
	return strings.Join(parts, "; ")
}

// safeWord keeps an enumerated value only when it is a plain lower-case
// word, so nothing else can reach a description.
func safeWord(s string) string {
	for _, r := range s {
		if r < 'a' || r > 'z' {
			return "unknown"
		}
	}
	if s == "" {
		return "unknown"
	}
	return s
}

func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n]
		for !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
	}
	return s
}

func validSHA(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// SecretClient is a Client whose token is read from a Secret at each call,
// so a rotated token is used at once and never kept in memory longer than
// a request.
type SecretClient struct {
	Provider provider.Name
	BaseURL  string
	Reader   client.Reader
	Secret   types.NamespacedName
	// Key in the Secret; default "token".
	Key  string
	HTTP *http.Client
}

func (s *SecretClient) client(ctx context.Context) (*Client, error) {
	tok, err := TokenFromSecret(ctx, s.Reader, s.Secret, s.Key)
	if err != nil {
		return nil, err
	}
	c, err := New(s.Provider, s.BaseURL, tok)
	if err != nil {
		return nil, err
	}
	if s.HTTP != nil {
		c.HTTP = s.HTTP
	}
	return c, nil
}

// Post implements preview.StatusPoster.
func (s *SecretClient) Post(ctx context.Context, st Status) error {
	c, err := s.client(ctx)
	if err != nil {
		return err
	}
	return c.Post(ctx, st)
}
