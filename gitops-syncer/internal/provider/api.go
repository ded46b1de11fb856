package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// GitLab access levels (members API).
const (
	// GitLabDeveloper may push to unprotected branches.
	GitLabDeveloper = 30
	// GitLabMaintainer may push to protected branches.
	GitLabMaintainer = 40
)

// API asks a provider's REST API whether a review is what it claims: that
// the reviewer may write to the repository now, and that the review is the
// reviewer's current state on the pull request. A webhook payload says
// neither reliably: GitHub's author_association MEMBER is any organisation
// member (read-only included), and a GitLab approval event carries no id of
// its own, so a replay with a new delivery id looks like a new approval.
type API struct {
	Provider Name
	// BaseURL is the API root: "https://api.github.com" for GitHub, the
	// server's root URL for Gitea and GitLab (the API paths are added).
	BaseURL string
	// Token returns the API token for one call (read from a Secret each
	// time, so a rotated token is used at once). It is never logged.
	Token func(ctx context.Context) (string, error)
	// GitLabMinAccess is the lowest GitLab access level whose approvals
	// count; default GitLabDeveloper.
	GitLabMinAccess int
	HTTP            *http.Client
}

// ErrUnconfirmed says the provider's API does not confirm the review; it is
// ignored, never recorded.
var ErrUnconfirmed = errors.New("review not confirmed by the provider")

// Confirm checks the review of ev with the provider's API and returns the
// review to record: for Gitea and GitHub with the provider's own review id,
// so a redelivery maps to the same Approval. It returns an error wrapping
// ErrUnconfirmed when the reviewer may not write or the review is not the
// reviewer's current state, and another error when the API cannot be asked
// (then the delivery is retried).
func (a *API) Confirm(ctx context.Context, ev *Event) (*Review, error) {
	rev := ev.Review
	if rev == nil {
		return nil, errors.New("no review in the event")
	}
	switch a.Provider {
	case GitHub, Gitea:
		if ev.Provider != a.Provider {
			return nil, fmt.Errorf("%w: a %s review checked against the %s API", ErrUnconfirmed, ev.Provider, a.Provider)
		}
		return a.confirmGitHubLike(ctx, ev)
	case GitLab:
		if ev.Provider != GitLab {
			return nil, fmt.Errorf("%w: a %s review checked against the GitLab API", ErrUnconfirmed, ev.Provider)
		}
		return a.confirmGitLab(ctx, ev)
	}
	return nil, fmt.Errorf("no review API for provider %q", a.Provider)
}

// ghReviewState is one review as GitHub and Gitea list them.
type apiReview struct {
	ID       int64  `json:"id"`
	State    string `json:"state"`
	CommitID string `json:"commit_id"`
	User     *struct {
		Login string `json:"login"`
	} `json:"user"`
	// Gitea marks a dismissed review with a flag rather than a state.
	Dismissed bool `json:"dismissed"`
}

// stateOf maps a listed review's state to a decision; "" for a comment or a
// pending review, which decides nothing.
func (r apiReview) stateOf() ReviewState {
	if r.Dismissed {
		return ReviewDismissed
	}
	switch strings.ToUpper(r.State) {
	case "APPROVED":
		return ReviewApproved
	case "CHANGES_REQUESTED", "REQUEST_CHANGES":
		return ReviewChangesRequested
	case "DISMISSED":
		return ReviewDismissed
	}
	return ""
}

func (a *API) confirmGitHubLike(ctx context.Context, ev *Event) (*Review, error) {
	rev := ev.Review
	owner, name, ok := strings.Cut(ev.Repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return nil, fmt.Errorf("repository %q is not owner/name", ev.Repo)
	}
	prefix := ""
	if a.Provider == Gitea {
		prefix = "/api/v1"
	}
	repoPath := fmt.Sprintf("%s/repos/%s/%s", prefix, url.PathEscape(owner), url.PathEscape(name))

	// May the reviewer write? GitHub: permission admin or write (maintain
	// reports write, with role_name maintain); Gitea: write, admin, owner.
	var perm struct {
		Permission string `json:"permission"`
		RoleName   string `json:"role_name"`
	}
	if err := a.get(ctx, repoPath+"/collaborators/"+url.PathEscape(rev.Login)+"/permission", &perm); err != nil {
		return nil, fmt.Errorf("check the reviewer's permission: %w", err)
	}
	if !writePermission(perm.Permission) && !writePermission(perm.RoleName) {
		return nil, fmt.Errorf("%w: %s has %q access to %s", ErrUnconfirmed, rev.Reviewer, perm.Permission, ev.Repo)
	}

	// Is the review the reviewer's latest decision on the pull request?
	var latest *apiReview
	for page := 1; page <= 30; page++ {
		var list []apiReview
		p := fmt.Sprintf("%s/pulls/%d/reviews?per_page=100&page=%d", repoPath, rev.PullRequest.Number, page)
		if a.Provider == Gitea {
			p = fmt.Sprintf("%s/pulls/%d/reviews?limit=50&page=%d", repoPath, rev.PullRequest.Number, page)
		}
		if err := a.get(ctx, p, &list); err != nil {
			return nil, fmt.Errorf("list the pull request's reviews: %w", err)
		}
		for i := range list {
			r := list[i]
			if r.User == nil || !strings.EqualFold(r.User.Login, rev.Login) || r.stateOf() == "" {
				continue
			}
			if latest == nil || r.ID > latest.ID {
				latest = &r
			}
		}
		if len(list) == 0 || (a.Provider == GitHub && len(list) < 100) {
			break
		}
	}
	if latest == nil {
		return nil, fmt.Errorf("%w: %s has no review deciding pull request %d", ErrUnconfirmed, rev.Reviewer, rev.PullRequest.Number)
	}
	if latest.stateOf() != rev.State {
		return nil, fmt.Errorf("%w: %s's latest review of pull request %d is %s, not %s", ErrUnconfirmed, rev.Reviewer, rev.PullRequest.Number, latest.stateOf(), rev.State)
	}
	if a.Provider == GitHub && latest.ID != rev.ID {
		return nil, fmt.Errorf("%w: review %d is not %s's latest (%d)", ErrUnconfirmed, rev.ID, rev.Reviewer, latest.ID)
	}
	out := *rev
	out.ID = latest.ID
	if validSHA(latest.CommitID) {
		if latest.CommitID != rev.CommitSHA {
			return nil, fmt.Errorf("%w: %s's latest review is of %s, not %s", ErrUnconfirmed, rev.Reviewer, latest.CommitID, rev.CommitSHA)
		}
	}
	out.Access = AccessWrite
	return &out, nil
}

func writePermission(p string) bool {
	switch strings.ToLower(p) {
	case "admin", "maintain", "write", "owner":
		return true
	}
	return false
}

func (a *API) confirmGitLab(ctx context.Context, ev *Event) (*Review, error) {
	rev := ev.Review
	if ev.ProjectID <= 0 || rev.UserID <= 0 {
		return nil, fmt.Errorf("%w: no project or user id to ask GitLab about", ErrUnconfirmed)
	}
	project := fmt.Sprintf("/api/v4/projects/%d", ev.ProjectID)
	min := a.GitLabMinAccess
	if min == 0 {
		min = GitLabDeveloper
	}
	var member struct {
		AccessLevel int    `json:"access_level"`
		State       string `json:"state"`
	}
	err := a.get(ctx, fmt.Sprintf("%s/members/all/%d", project, rev.UserID), &member)
	var he *httpError
	if errors.As(err, &he) && he.status == http.StatusNotFound {
		return nil, fmt.Errorf("%w: %s is not a member of project %d", ErrUnconfirmed, rev.Reviewer, ev.ProjectID)
	}
	if err != nil {
		return nil, fmt.Errorf("check the approver's access: %w", err)
	}
	if member.AccessLevel < min || (member.State != "" && member.State != "active") {
		return nil, fmt.Errorf("%w: %s has access level %d to project %d; %d needed", ErrUnconfirmed, rev.Reviewer, member.AccessLevel, ev.ProjectID, min)
	}

	// The merge request must still be at the commit the event names, and
	// the approvals API must agree with the event: approved_by lists the
	// user after an approval and not after an unapproval. A replay of an
	// old approval then changes nothing.
	var mr struct {
		SHA string `json:"sha"`
	}
	if err := a.get(ctx, fmt.Sprintf("%s/merge_requests/%d", project, rev.PullRequest.Number), &mr); err != nil {
		return nil, fmt.Errorf("read the merge request: %w", err)
	}
	if mr.SHA != rev.CommitSHA {
		return nil, fmt.Errorf("%w: merge request %d is at %s, not %s", ErrUnconfirmed, rev.PullRequest.Number, mr.SHA, rev.CommitSHA)
	}
	var approvals struct {
		ApprovedBy []struct {
			User struct {
				ID       int64  `json:"id"`
				Username string `json:"username"`
			} `json:"user"`
		} `json:"approved_by"`
	}
	if err := a.get(ctx, fmt.Sprintf("%s/merge_requests/%d/approvals", project, rev.PullRequest.Number), &approvals); err != nil {
		return nil, fmt.Errorf("read the merge request's approvals: %w", err)
	}
	approved := false
	for _, ab := range approvals.ApprovedBy {
		if ab.User.ID == rev.UserID {
			approved = true
		}
	}
	switch {
	case rev.State == ReviewApproved && !approved:
		return nil, fmt.Errorf("%w: GitLab does not list %s among merge request %d's approvers", ErrUnconfirmed, rev.Reviewer, rev.PullRequest.Number)
	case rev.State == ReviewDismissed && approved:
		return nil, fmt.Errorf("%w: GitLab still lists %s among merge request %d's approvers", ErrUnconfirmed, rev.Reviewer, rev.PullRequest.Number)
	}
	out := *rev
	out.Access = AccessWrite
	return &out, nil
}

// httpError is an answer other than 2xx.
type httpError struct {
	status  int
	message string
}

func (e *httpError) Error() string { return e.message }

// get sends a GET to path under BaseURL and decodes the JSON answer.
// Errors carry the status and a short excerpt, never the token.
func (a *API) get(ctx context.Context, path string, out any) error {
	token, err := a.Token(ctx)
	if err != nil {
		return err
	}
	endpoint := strings.TrimSuffix(a.BaseURL, "/") + path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	if err != nil {
		return fmt.Errorf("request: %w", err)
	}
	switch a.Provider {
	case GitHub:
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Accept", "application/vnd.github+json")
		req.Header.Set("X-GitHub-Api-Version", "2022-11-28")
	case Gitea:
		req.Header.Set("Authorization", "token "+token)
	case GitLab:
		req.Header.Set("PRIVATE-TOKEN", token)
	}
	hc := a.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	shown := req.URL.Path
	resp, err := hc.Do(req)
	if err != nil {
		msg := err.Error()
		if token != "" {
			msg = strings.ReplaceAll(msg, token, "[redacted]")
		}
		return fmt.Errorf("GET %s: %s", shown, msg)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if resp.StatusCode/100 != 2 {
		excerpt := string(data)
		if token != "" {
			excerpt = strings.ReplaceAll(excerpt, token, "[redacted]")
		}
		return &httpError{status: resp.StatusCode, message: fmt.Sprintf("GET %s: HTTP %d: %s", shown, resp.StatusCode, sluicev1.Truncate(strings.Join(strings.Fields(excerpt), " "), 200))}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("GET %s: decode answer: %w", shown, err)
	}
	return nil
}
