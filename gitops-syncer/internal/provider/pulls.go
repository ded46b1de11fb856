package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
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
	if p.Head == "" || p.Base == "" || p.Title == "" {
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
		out, err = giteaOpenPull(c.c, p)
	case *githubComments:
		out, err = githubOpenPull(ctx, c.c, p)
	case *gitlabComments:
		out, err = gitlabOpenPull(ctx, c.c, p)
	default:
		return out, fmt.Errorf("no pull request API for provider %q", a.Provider)
	}
	if err != nil {
		return out, redactToken(err, token)
	}
	return out, nil
}

func giteaOpenPull(c *gitea.Client, p PullRequestOpen) (OpenedPullRequest, error) {
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
	}
	pr, resp, err = c.CreatePullRequest(owner, name, gitea.CreatePullRequestOption{Head: p.Head, Base: p.Base, Title: p.Title, Body: p.Body})
	if err != nil {
		return OpenedPullRequest{}, giteaError(fmt.Sprintf("open a pull request from %s into %s of %s", p.Head, p.Base, p.Repo), resp, err)
	}
	return OpenedPullRequest{Number: pr.Index, URL: pr.HTMLURL}, nil
}

func githubOpenPull(ctx context.Context, c *github.Client, p PullRequestOpen) (OpenedPullRequest, error) {
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
	pr, resp, err := c.PullRequests.Create(ctx, owner, name, &github.NewPullRequest{Title: &p.Title, Head: &p.Head, Base: &p.Base, Body: &p.Body})
	if err != nil {
		return OpenedPullRequest{}, httpError(fmt.Sprintf("open a pull request from %s into %s of %s", p.Head, p.Base, p.Repo), responseOf(resp), err)
	}
	return OpenedPullRequest{Number: int64(pr.GetNumber()), URL: pr.GetHTMLURL()}, nil
}

func gitlabOpenPull(ctx context.Context, c *gitlab.Client, p PullRequestOpen) (OpenedPullRequest, error) {
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
	mr, resp, err := c.MergeRequests.CreateMergeRequest(pid, &gitlab.CreateMergeRequestOptions{
		Title: &p.Title, Description: &p.Body, SourceBranch: &p.Head, TargetBranch: &p.Base}, gitlab.WithContext(ctx))
	if err != nil {
		return OpenedPullRequest{}, httpError(fmt.Sprintf("open a merge request from %s into %s of %v", p.Head, p.Base, pid), gitlabResponse(resp), err)
	}
	return OpenedPullRequest{Number: mr.IID, URL: mr.WebURL}, nil
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
