package provider

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/google/go-github/v75/github"
	gitlab "gitlab.com/gitlab-org/api/client-go"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
)

// Thread is a pull request's conversation.
type Thread struct {
	// Repo is "owner/name" (GitHub, Gitea) or the project path (GitLab);
	// ProjectID is GitLab's numeric project id.
	Repo      string
	ProjectID int64
	Number    int64
	// Merged: the pull request is known to be merged (a change of the
	// tracked branch records it); its comment is still kept current (the
	// verification of what its merge applied), where a closed one's is
	// left alone.
	Merged bool
}

// CommentResult says what SyncComments did.
type CommentResult struct {
	// Closed: the pull request is closed or merged (and the thread was
	// not marked Merged); nothing was written.
	Closed                   bool
	Created, Edited, Deleted int
}

// CommentLimit is the size limit of one comment body on the provider.
func (a *API) CommentLimit() int {
	switch a.Provider {
	case GitLab:
		return review.LimitGitLab
	case Gitea:
		return review.LimitGitea
	}
	return review.LimitGitHub
}

// comment is one comment of a pull request as the providers list them.
type comment struct {
	id     int64
	body   string
	author string
}

// commentAPI is one provider's comment calls, through its Go client.
type commentAPI interface {
	open(ctx context.Context, t Thread) (bool, error)
	self(ctx context.Context) (string, error)
	list(ctx context.Context, t Thread) ([]comment, error)
	create(ctx context.Context, t Thread, body string) error
	edit(ctx context.Context, t Thread, id int64, body string) error
	remove(ctx context.Context, t Thread, id int64) error
}

// SyncComments makes Sluice's comments on the pull request exactly bodies
// (review.Markdown's parts, in order): each part found by its marker
// among the comments of the token's own user is edited in place when it
// changed, a missing part is created, a part no longer needed or a
// duplicate is deleted. Comments of anyone else are never touched, even
// when they carry the marker. A closed or merged pull request is left
// alone. Errors name the call, never the token.
func (a *API) SyncComments(ctx context.Context, t Thread, bodies []string) (CommentResult, error) {
	c, err := a.commentClient(ctx)
	if err != nil {
		return CommentResult{}, err
	}
	return syncComments(ctx, c, t, bodies)
}

func syncComments(ctx context.Context, c commentAPI, t Thread, bodies []string) (CommentResult, error) {
	var res CommentResult
	if !t.Merged {
		open, err := c.open(ctx, t)
		if err != nil {
			return res, fmt.Errorf("read pull request %d: %w", t.Number, err)
		}
		if !open {
			res.Closed = true
			return res, nil
		}
	}
	me, err := c.self(ctx)
	if err != nil {
		return res, fmt.Errorf("read the token's user: %w", err)
	}
	all, err := c.list(ctx, t)
	if err != nil {
		return res, fmt.Errorf("list the comments of pull request %d: %w", t.Number, err)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].id < all[j].id })
	ours := map[int]comment{}
	var extra []comment
	for _, cm := range all {
		part, ok := review.PartOf(cm.body)
		if !ok || !strings.EqualFold(cm.author, me) {
			continue
		}
		if _, dup := ours[part]; dup || part > len(bodies) {
			extra = append(extra, cm)
			continue
		}
		ours[part] = cm
	}
	for i, body := range bodies {
		cm, ok := ours[i+1]
		switch {
		case !ok:
			if err := c.create(ctx, t, body); err != nil {
				return res, fmt.Errorf("create comment part %d: %w", i+1, err)
			}
			res.Created++
		case cm.body != body:
			if err := c.edit(ctx, t, cm.id, body); err != nil {
				return res, fmt.Errorf("edit comment %d: %w", cm.id, err)
			}
			res.Edited++
		}
	}
	for _, cm := range extra {
		if err := c.remove(ctx, t, cm.id); err != nil {
			return res, fmt.Errorf("delete comment %d: %w", cm.id, err)
		}
		res.Deleted++
	}
	return res, nil
}

// commentClient returns the provider's client with a fresh token.
func (a *API) commentClient(ctx context.Context) (commentAPI, error) {
	token, err := a.Token(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API token: %w", err)
	}
	hc := a.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	base := strings.TrimSuffix(a.BaseURL, "/")
	switch a.Provider {
	case GitHub:
		c := github.NewClient(hc).WithAuthToken(token)
		if base != "" {
			u, err := url.Parse(base + "/")
			if err != nil {
				return nil, fmt.Errorf("API URL: %w", err)
			}
			c.BaseURL = u
		}
		return &githubComments{c: c, api: a}, nil
	case GitLab:
		c, err := gitlab.NewClient(token, gitlab.WithBaseURL(base+"/api/v4"), gitlab.WithHTTPClient(hc))
		if err != nil {
			return nil, fmt.Errorf("GitLab client: %w", redactToken(err, token))
		}
		return &gitlabComments{c: c, api: a}, nil
	case Gitea:
		// An empty version skips the client's version request.
		c, err := gitea.NewClient(base, gitea.SetToken(token), gitea.SetHTTPClient(hc), gitea.SetGiteaVersion(""), gitea.SetContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("Gitea client: %w", redactToken(err, token))
		}
		return &giteaComments{c: c, api: a}, nil
	}
	return nil, fmt.Errorf("no comment API for provider %q", a.Provider)
}

// selfCache remembers the token's user name per API (one request per
// process, not per comment).
var selfCache sync.Map // *API → string

func cachedSelf(a *API, get func() (string, error)) (string, error) {
	if v, ok := selfCache.Load(a); ok {
		return v.(string), nil
	}
	login, err := get()
	if err != nil {
		return "", err
	}
	if login == "" {
		return "", errors.New("the provider names no user for the token")
	}
	selfCache.Store(a, login)
	return login, nil
}

func redactToken(err error, token string) error {
	if err == nil || token == "" || !strings.Contains(err.Error(), token) {
		return err
	}
	return errors.New(strings.ReplaceAll(err.Error(), token, "[redacted]"))
}

func splitRepo(repo string) (string, string, error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return "", "", fmt.Errorf("repository %q is not owner/name", repo)
	}
	return owner, name, nil
}

// githubComments are issue comments through go-github.
type githubComments struct {
	c   *github.Client
	api *API
}

func (g *githubComments) open(ctx context.Context, t Thread) (bool, error) {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return false, err
	}
	pr, _, err := g.c.PullRequests.Get(ctx, owner, name, int(t.Number))
	if err != nil {
		return false, err
	}
	return pr.GetState() == "open", nil
}

func (g *githubComments) self(ctx context.Context) (string, error) {
	return cachedSelf(g.api, func() (string, error) {
		u, _, err := g.c.Users.Get(ctx, "")
		if err != nil {
			return "", err
		}
		return u.GetLogin(), nil
	})
}

func (g *githubComments) list(ctx context.Context, t Thread) ([]comment, error) {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return nil, err
	}
	var out []comment
	opts := &github.IssueListCommentsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for page := 0; page < 50; page++ {
		list, resp, err := g.c.Issues.ListComments(ctx, owner, name, int(t.Number), opts)
		if err != nil {
			return nil, err
		}
		for _, cm := range list {
			out = append(out, comment{id: cm.GetID(), body: cm.GetBody(), author: cm.GetUser().GetLogin()})
		}
		if resp == nil || resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return out, nil
}

func (g *githubComments) create(ctx context.Context, t Thread, body string) error {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return err
	}
	_, _, err = g.c.Issues.CreateComment(ctx, owner, name, int(t.Number), &github.IssueComment{Body: github.Ptr(body)})
	return err
}

func (g *githubComments) edit(ctx context.Context, t Thread, id int64, body string) error {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return err
	}
	_, _, err = g.c.Issues.EditComment(ctx, owner, name, id, &github.IssueComment{Body: github.Ptr(body)})
	return err
}

func (g *githubComments) remove(ctx context.Context, t Thread, id int64) error {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return err
	}
	_, err = g.c.Issues.DeleteComment(ctx, owner, name, id)
	return err
}

// gitlabComments are merge request notes through GitLab's client.
type gitlabComments struct {
	c   *gitlab.Client
	api *API
}

func (g *gitlabComments) open(ctx context.Context, t Thread) (bool, error) {
	mr, _, err := g.c.MergeRequests.GetMergeRequest(t.ProjectID, t.Number, nil, gitlab.WithContext(ctx))
	if err != nil {
		return false, err
	}
	return mr.State == "opened", nil
}

func (g *gitlabComments) self(ctx context.Context) (string, error) {
	return cachedSelf(g.api, func() (string, error) {
		u, _, err := g.c.Users.CurrentUser(gitlab.WithContext(ctx))
		if err != nil {
			return "", err
		}
		return u.Username, nil
	})
}

func (g *gitlabComments) list(ctx context.Context, t Thread) ([]comment, error) {
	var out []comment
	opts := &gitlab.ListMergeRequestNotesOptions{ListOptions: gitlab.ListOptions{PerPage: 100, Page: 1}}
	for page := 0; page < 50; page++ {
		notes, resp, err := g.c.Notes.ListMergeRequestNotes(t.ProjectID, t.Number, opts, gitlab.WithContext(ctx))
		if err != nil {
			return nil, err
		}
		for _, n := range notes {
			if n.System {
				continue
			}
			out = append(out, comment{id: n.ID, body: n.Body, author: n.Author.Username})
		}
		if resp == nil || resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return out, nil
}

func (g *gitlabComments) create(ctx context.Context, t Thread, body string) error {
	_, _, err := g.c.Notes.CreateMergeRequestNote(t.ProjectID, t.Number, &gitlab.CreateMergeRequestNoteOptions{Body: gitlab.Ptr(body)}, gitlab.WithContext(ctx))
	return err
}

func (g *gitlabComments) edit(ctx context.Context, t Thread, id int64, body string) error {
	_, _, err := g.c.Notes.UpdateMergeRequestNote(t.ProjectID, t.Number, id, &gitlab.UpdateMergeRequestNoteOptions{Body: gitlab.Ptr(body)}, gitlab.WithContext(ctx))
	return err
}

func (g *gitlabComments) remove(ctx context.Context, t Thread, id int64) error {
	_, err := g.c.Notes.DeleteMergeRequestNote(t.ProjectID, t.Number, id, gitlab.WithContext(ctx))
	return err
}

// giteaComments are issue comments through Gitea's SDK (the client
// carries the context it was made with).
type giteaComments struct {
	c   *gitea.Client
	api *API
}

func (g *giteaComments) open(_ context.Context, t Thread) (bool, error) {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return false, err
	}
	pr, resp, err := g.c.GetPullRequest(owner, name, t.Number)
	if err != nil {
		return false, giteaError("get the pull request", resp, err)
	}
	return pr.State == gitea.StateOpen && !pr.HasMerged, nil
}

func (g *giteaComments) self(_ context.Context) (string, error) {
	return cachedSelf(g.api, func() (string, error) {
		u, resp, err := g.c.GetMyUserInfo()
		if err != nil {
			return "", giteaError("get the token's user", resp, err)
		}
		return u.UserName, nil
	})
}

func (g *giteaComments) list(_ context.Context, t Thread) ([]comment, error) {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return nil, err
	}
	// Gitea's list of an issue's comments has no pages: it returns every
	// comment whatever page is asked for (unlike its other lists), so it is
	// read once. Paging through it read each comment once per full page,
	// and SyncComments then deleted Sluice's own comment as a duplicate of
	// itself. Ids are still de-duplicated, should a later Gitea page it.
	list, resp, err := g.c.ListIssueComments(owner, name, t.Number, gitea.ListIssueCommentOptions{})
	if err != nil {
		return nil, giteaError("list the comments", resp, err)
	}
	out := make([]comment, 0, len(list))
	seen := make(map[int64]bool, len(list))
	for _, cm := range list {
		if cm == nil || seen[cm.ID] {
			continue
		}
		seen[cm.ID] = true
		author := ""
		if cm.Poster != nil {
			author = cm.Poster.UserName
		}
		out = append(out, comment{id: cm.ID, body: cm.Body, author: author})
	}
	return out, nil
}

func (g *giteaComments) create(_ context.Context, t Thread, body string) error {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return err
	}
	_, resp, err := g.c.CreateIssueComment(owner, name, t.Number, gitea.CreateIssueCommentOption{Body: body})
	return giteaError("create a comment", resp, err)
}

func (g *giteaComments) edit(_ context.Context, t Thread, id int64, body string) error {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return err
	}
	_, resp, err := g.c.EditIssueComment(owner, name, id, gitea.EditIssueCommentOption{Body: body})
	return giteaError("edit a comment", resp, err)
}

func (g *giteaComments) remove(_ context.Context, t Thread, id int64) error {
	owner, name, err := splitRepo(t.Repo)
	if err != nil {
		return err
	}
	resp, err := g.c.DeleteIssueComment(owner, name, id)
	return giteaError("delete a comment", resp, err)
}

// Check is one GitHub Check Run: one per release and head commit, so a
// branch protection rule can require it.
type Check struct {
	Repo    string
	HeadSHA string
	// Name is "sluice/<release>".
	Name    string
	Title   string
	Summary string
	// Conclusion is success, failure or neutral when the change is
	// decided; "" leaves the run in progress (waiting for approvals).
	Conclusion string
}

// checkSummaryLimit is GitHub's limit of a check run's output summary.
const checkSummaryLimit = 65535

// SyncCheckRun creates the Check Run of c, or updates the one of the same
// name on the same commit, so there is one per release and commit.
// GitHub only; other providers return nil (they get commit statuses).
func (a *API) SyncCheckRun(ctx context.Context, c Check) error {
	if a.Provider != GitHub {
		return nil
	}
	cl, err := a.commentClient(ctx)
	if err != nil {
		return err
	}
	gh := cl.(*githubComments).c
	owner, name, err := splitRepo(c.Repo)
	if err != nil {
		return err
	}
	summary := c.Summary
	if len(summary) > checkSummaryLimit {
		summary = summary[:checkSummaryLimit-200] + "\n\n… cut: see the pull request's Sluice comment\n"
	}
	out := &github.CheckRunOutput{Title: github.Ptr(c.Title), Summary: github.Ptr(summary)}
	status := "completed"
	var conclusion *string
	if c.Conclusion == "" {
		status = "in_progress"
	} else {
		conclusion = github.Ptr(c.Conclusion)
	}
	runs, _, err := gh.Checks.ListCheckRunsForRef(ctx, owner, name, c.HeadSHA, &github.ListCheckRunsOptions{CheckName: github.Ptr(c.Name), Filter: github.Ptr("latest")})
	if err != nil {
		return fmt.Errorf("list check runs of %s: %w", c.HeadSHA, err)
	}
	if runs != nil && len(runs.CheckRuns) > 0 {
		id := runs.CheckRuns[0].GetID()
		_, _, err = gh.Checks.UpdateCheckRun(ctx, owner, name, id, github.UpdateCheckRunOptions{Name: c.Name, Status: github.Ptr(status), Conclusion: conclusion, Output: out})
		if err != nil {
			return fmt.Errorf("update check run %d: %w", id, err)
		}
		return nil
	}
	_, _, err = gh.Checks.CreateCheckRun(ctx, owner, name, github.CreateCheckRunOptions{Name: c.Name, HeadSHA: c.HeadSHA, Status: github.Ptr(status), Conclusion: conclusion, Output: out})
	if err != nil {
		return fmt.Errorf("create check run %s: %w", c.Name, err)
	}
	return nil
}
