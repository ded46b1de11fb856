package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"code.gitea.io/sdk/gitea"
	"github.com/google/go-github/v75/github"
	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// PullRequestOpen is a pull request Sluice opens itself (a revert of a
// failed change): from Head, a branch of the same repository, into Base.
type PullRequestOpen struct {
	// Repo is "owner/name" (GitHub, Gitea) or the project path (GitLab);
	// ProjectID is GitLab's numeric project id (the path is used when 0).
	Repo      string
	ProjectID int64
	Head      string
	Base      string
	Title     string
	Body      string
}

// OpenedPullRequest is a pull request found or opened by OpenPullRequest.
type OpenedPullRequest struct {
	Number int64
	URL    string
	// Existing: a pull request from Head was there already (in any state,
	// merged and closed included), so none was opened.
	Existing bool
}

// OpenPullRequest returns the pull request from p.Head into p.Base,
// opening it only when the provider has none from that branch in any
// state: a restart, or a revert already merged or closed by a person,
// never opens a second one. Errors name the call and the HTTP status,
// never the token.
func (a *API) OpenPullRequest(ctx context.Context, p PullRequestOpen) (OpenedPullRequest, error) {
	return a.pullRequest(ctx, p, true)
}

// FindPullRequest returns the pull request from p.Head into p.Base in any
// state, if there is one; it opens none.
func (a *API) FindPullRequest(ctx context.Context, p PullRequestOpen) (OpenedPullRequest, bool, error) {
	pr, err := a.pullRequest(ctx, p, false)
	return pr, err == nil && pr.Existing, err
}

// pullRequest finds the pull request from p.Head, and opens it when open
// is set and there is none.
func (a *API) pullRequest(ctx context.Context, p PullRequestOpen, open bool) (OpenedPullRequest, error) {
	if p.Head == "" || p.Base == "" || (open && p.Title == "") {
		return OpenedPullRequest{}, errors.New("open pull request: head, base and title are required")
	}
	token, err := a.Token(ctx)
	if err != nil {
		return OpenedPullRequest{}, fmt.Errorf("read the API token: %w", err)
	}
	cl, err := a.commentClient(ctx)
	if err != nil {
		return OpenedPullRequest{}, err
	}
	var out OpenedPullRequest
	switch c := cl.(type) {
	case *giteaComments:
		out, err = giteaOpenPull(c.c, p, open)
	case *githubComments:
		out, err = githubOpenPull(ctx, c.c, p, open)
	case *gitlabComments:
		out, err = gitlabOpenPull(ctx, c.c, p, open)
	default:
		return out, fmt.Errorf("no pull request API for provider %q", a.Provider)
	}
	if err != nil {
		return out, redactToken(err, token)
	}
	return out, nil
}

func giteaOpenPull(c *gitea.Client, p PullRequestOpen, open bool) (OpenedPullRequest, error) {
	owner, name, err := splitRepo(p.Repo)
	if err != nil {
		return OpenedPullRequest{}, err
	}
	pr, resp, err := c.GetPullRequestByBaseHead(owner, name, p.Base, p.Head)
	switch {
	case err == nil:
		return OpenedPullRequest{Number: pr.Index, URL: pr.HTMLURL, Existing: true}, nil
	case resp == nil || resp.StatusCode != http.StatusNotFound:
		return OpenedPullRequest{}, giteaError(fmt.Sprintf("find the pull request from %s into %s of %s", p.Head, p.Base, p.Repo), resp, err)
	case !open:
		return OpenedPullRequest{}, nil
	}
	pr, resp, err = c.CreatePullRequest(owner, name, gitea.CreatePullRequestOption{Head: p.Head, Base: p.Base, Title: p.Title, Body: p.Body})
	if err != nil {
		return OpenedPullRequest{}, giteaError(fmt.Sprintf("open a pull request from %s into %s of %s", p.Head, p.Base, p.Repo), resp, err)
	}
	return OpenedPullRequest{Number: pr.Index, URL: pr.HTMLURL}, nil
}

func githubOpenPull(ctx context.Context, c *github.Client, p PullRequestOpen, open bool) (OpenedPullRequest, error) {
	owner, name, err := splitRepo(p.Repo)
	if err != nil {
		return OpenedPullRequest{}, err
	}
	list, resp, err := c.PullRequests.List(ctx, owner, name, &github.PullRequestListOptions{State: "all", Head: owner + ":" + p.Head, Base: p.Base})
	if err != nil {
		return OpenedPullRequest{}, httpError(fmt.Sprintf("find the pull request from %s into %s of %s", p.Head, p.Base, p.Repo), responseOf(resp), err)
	}
	for _, pr := range list {
		if pr.GetHead().GetRef() == p.Head {
			return OpenedPullRequest{Number: int64(pr.GetNumber()), URL: pr.GetHTMLURL(), Existing: true}, nil
		}
	}
	if !open {
		return OpenedPullRequest{}, nil
	}
	pr, resp, err := c.PullRequests.Create(ctx, owner, name, &github.NewPullRequest{Title: &p.Title, Head: &p.Head, Base: &p.Base, Body: &p.Body})
	if err != nil {
		return OpenedPullRequest{}, httpError(fmt.Sprintf("open a pull request from %s into %s of %s", p.Head, p.Base, p.Repo), responseOf(resp), err)
	}
	return OpenedPullRequest{Number: int64(pr.GetNumber()), URL: pr.GetHTMLURL()}, nil
}

func gitlabOpenPull(ctx context.Context, c *gitlab.Client, p PullRequestOpen, open bool) (OpenedPullRequest, error) {
	var pid any = p.Repo
	if p.ProjectID > 0 {
		pid = p.ProjectID
	}
	list, resp, err := c.MergeRequests.ListProjectMergeRequests(pid, &gitlab.ListProjectMergeRequestsOptions{
		State: gitlab.Ptr("all"), SourceBranch: &p.Head, TargetBranch: &p.Base}, gitlab.WithContext(ctx))
	if err != nil {
		return OpenedPullRequest{}, httpError(fmt.Sprintf("find the merge request from %s into %s of %v", p.Head, p.Base, pid), gitlabResponse(resp), err)
	}
	for _, mr := range list {
		if mr != nil && mr.SourceBranch == p.Head {
			return OpenedPullRequest{Number: mr.IID, URL: mr.WebURL, Existing: true}, nil
		}
	}
	if !open {
		return OpenedPullRequest{}, nil
	}
	mr, resp, err := c.MergeRequests.CreateMergeRequest(pid, &gitlab.CreateMergeRequestOptions{
		Title: &p.Title, Description: &p.Body, SourceBranch: &p.Head, TargetBranch: &p.Base}, gitlab.WithContext(ctx))
	if err != nil {
		return OpenedPullRequest{}, httpError(fmt.Sprintf("open a merge request from %s into %s of %v", p.Head, p.Base, pid), gitlabResponse(resp), err)
	}
	return OpenedPullRequest{Number: mr.IID, URL: mr.WebURL}, nil
}

// RepoOf is the repository a clone URL names on this provider ("owner/name",
// GitLab's project path), and false when the URL is on another host: the
// provider's server for Gitea and GitLab (and GitHub Enterprise), github.com
// for GitHub's public API. A server under a path ("https://host/git/")
// has it removed.
func (a *API) RepoOf(cloneURL string) (string, bool) {
	u, err := url.Parse(cloneURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return "", false
	}
	base, err := url.Parse(strings.TrimSuffix(a.BaseURL, "/"))
	if err != nil {
		return "", false
	}
	host, prefix := base.Host, strings.Trim(base.Path, "/")
	if a.Provider == GitHub && (a.BaseURL == "" || base.Host == "api.github.com") {
		host, prefix = "github.com", ""
	}
	if a.Provider == GitHub && strings.HasSuffix(prefix, "api/v3") {
		prefix = strings.Trim(strings.TrimSuffix(prefix, "api/v3"), "/")
	}
	if !strings.EqualFold(u.Host, host) {
		return "", false
	}
	p := strings.Trim(u.Path, "/")
	if prefix != "" {
		if !strings.HasPrefix(p, prefix+"/") {
			return "", false
		}
		p = strings.TrimPrefix(p, prefix+"/")
	}
	p = strings.TrimSuffix(p, ".git")
	if a.Provider != GitLab && strings.Count(p, "/") != 1 || p == "" || strings.Contains(p, "//") {
		return "", false
	}
	return p, true
}

// PushAuth is the user name and password that push with the API token
// over HTTPS (GitHub: x-access-token, GitLab: oauth2; Gitea takes the
// token as any user's password).
func (a *API) PushAuth(ctx context.Context) (string, string, error) {
	token, err := a.Token(ctx)
	if err != nil {
		return "", "", fmt.Errorf("read the API token: %w", err)
	}
	switch a.Provider {
	case GitHub:
		return "x-access-token", token, nil
	case GitLab:
		return "oauth2", token, nil
	}
	return "sluice", token, nil
}

func responseOf(r *github.Response) *http.Response {
	if r == nil {
		return nil
	}
	return r.Response
}

func gitlabResponse(r *gitlab.Response) *http.Response {
	if r == nil {
		return nil
	}
	return r.Response
}

// giteaError is err of a Gitea SDK call with the call and its HTTP status.
func giteaError(op string, resp *gitea.Response, err error) error {
	if resp == nil {
		return httpError(op, nil, err)
	}
	return httpError(op, resp.Response, err)
}

// httpError says what call failed with which HTTP status, so an error is
// never empty: Gitea answers a server error to a user who is not a site
// admin with an empty message (its log has the cause), which its SDK
// returns as an error whose text is "".
func httpError(op string, resp *http.Response, err error) error {
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(err.Error())
	if resp == nil {
		if msg == "" {
			return fmt.Errorf("%s: failed with no message and no HTTP answer", op)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if msg == "" {
		hint := ""
		if resp.StatusCode >= 500 {
			hint = " (the server hides a server error's cause from users who are not site admins; its log has it)"
		}
		return fmt.Errorf("%s: HTTP %d with an empty message%s", op, resp.StatusCode, hint)
	}
	return fmt.Errorf("%s: HTTP %d: %w", op, resp.StatusCode, err)
}
