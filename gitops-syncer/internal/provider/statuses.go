package provider

import (
	"context"
	"fmt"
	"net/http"

	"code.gitea.io/sdk/gitea"
	"github.com/google/go-github/v75/github"
	gitlab "gitlab.com/gitlab-org/api/client-go"
)

// CommitStatus is one commit status as the provider spells it: State is
// the provider's word (GitLab says "failed" where GitHub and Gitea say
// "failure").
type CommitStatus struct {
	// Repo is "owner/name" (GitHub, Gitea); ProjectID is GitLab's project.
	Repo        string
	ProjectID   int64
	SHA         string
	Context     string
	State       string
	Description string
	TargetURL   string
}

// PostStatus creates a commit status through the provider's Go client.
// Errors name the call and the HTTP status, never the token (an answer
// quoting it is redacted).
func (a *API) PostStatus(ctx context.Context, s CommitStatus) error {
	token, err := a.Token(ctx)
	if err != nil {
		return fmt.Errorf("read the API token: %w", err)
	}
	cl, err := a.commentClient(ctx)
	if err != nil {
		return err
	}
	var resp *http.Response
	switch c := cl.(type) {
	case *githubComments:
		owner, name, err2 := splitRepo(s.Repo)
		if err2 != nil {
			return err2
		}
		var r *github.Response
		_, r, err = c.c.Repositories.CreateStatus(ctx, owner, name, s.SHA, &github.RepoStatus{State: github.Ptr(s.State), Context: github.Ptr(s.Context),
			Description: github.Ptr(s.Description), TargetURL: nonEmpty(s.TargetURL)})
		if r != nil {
			resp = r.Response
		}
	case *giteaComments:
		owner, name, err2 := splitRepo(s.Repo)
		if err2 != nil {
			return err2
		}
		var r *gitea.Response
		_, r, err = c.c.CreateStatus(owner, name, s.SHA, gitea.CreateStatusOption{State: gitea.StatusState(s.State), Context: s.Context,
			Description: s.Description, TargetURL: s.TargetURL})
		if r != nil {
			resp = r.Response
		}
	case *gitlabComments:
		if s.ProjectID <= 0 {
			return fmt.Errorf("commit status: no GitLab project id")
		}
		var r *gitlab.Response
		_, r, err = c.c.Commits.SetCommitStatus(s.ProjectID, s.SHA, &gitlab.SetCommitStatusOptions{State: gitlab.BuildStateValue(s.State),
			Name: gitlab.Ptr(s.Context), Description: gitlab.Ptr(s.Description), TargetURL: nonEmpty(s.TargetURL)}, gitlab.WithContext(ctx))
		if r != nil {
			resp = r.Response
		}
	default:
		return fmt.Errorf("no commit status API for provider %q", a.Provider)
	}
	if err == nil {
		return nil
	}
	return httpError("commit status of "+s.SHA, resp, redactToken(err, token))
}

func nonEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
