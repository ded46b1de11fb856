package provider_test

import (
	"context"
	"fmt"
	"testing"

	"code.gitea.io/sdk/gitea"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/giteatest"
	reviewmd "github.com/sluice-gitops/sluice/infra-validator/pkg/review"
)

// openGiteaPR pushes main and a branch to f and opens a pull request of
// the branch as the author.
func openGiteaPR(t *testing.T, f *giteatest.Forge) *gitea.PullRequest {
	g := gittest.NewRepo(t, t.TempDir(), "infra")
	g.WriteFile("README.md", "infra\n")
	base := g.Commit("base", "author@example.com")
	g.WriteFile("services/a.yaml", "replicas: 1\n")
	g.SetBranch("feature", g.Commit("change", "author@example.com"))
	g.SetBranch("main", base)
	f.Push(t, g.GitDir, f.Author, "refs/heads/main:refs/heads/main", "refs/heads/feature:refs/heads/feature")
	return f.OpenPullRequest(t, "feature", "change a")
}

// TestGitea_commentOfABusyPullRequestIsEditedNotDeleted: Gitea's list of an
// issue's comments has no pages (it returns every comment whatever page is
// asked for). A client paging through it while pages came back full read
// each comment once per page, took Sluice's own comment for a duplicate of
// itself and deleted it, on every pull request with 50 comments or more.
func TestGitea_commentOfABusyPullRequestIsEditedNotDeleted(t *testing.T) {
	f := giteatest.Start(t)
	ctx := context.Background()
	pr := openGiteaPR(t, f)
	api := &provider.API{Provider: provider.Gitea, BaseURL: f.URL, Token: func(context.Context) (string, error) { return f.Bot.Token, nil }}
	thread := provider.Thread{Repo: f.FullName(), Number: pr.Index}

	first := reviewmd.Markdown([]*reviewmd.Section{{Release: "cart-prod", Verdict: "pass", Risk: "low"}}, api.CommentLimit(), 5)
	res, err := api.SyncComments(ctx, thread, first)
	require.NoError(t, err)
	require.Equal(t, provider.CommentResult{Created: 1}, res)

	// A busy discussion: 60 comments by the author after Sluice's.
	author := f.Client(t, f.Author)
	for i := range 60 {
		_, _, err := author.CreateIssueComment(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreateIssueCommentOption{Body: fmt.Sprintf("comment %d", i)})
		require.NoError(t, err)
	}

	second := reviewmd.Markdown([]*reviewmd.Section{{Release: "cart-prod", Verdict: "fail", Risk: "high"}}, api.CommentLimit(), 5)
	res, err = api.SyncComments(ctx, thread, second)
	require.NoError(t, err)
	assert.Equal(t, provider.CommentResult{Edited: 1}, res, "Sluice's comment is edited, nothing deleted")

	list, _, err := author.ListIssueComments(giteatest.Org, giteatest.Repo, pr.Index, gitea.ListIssueCommentOptions{})
	require.NoError(t, err)
	require.Len(t, list, 61)
	assert.Equal(t, f.Bot.Name, list[0].Poster.UserName)
	assert.Equal(t, second[0], list[0].Body)

	// Unchanged: nothing written.
	res, err = api.SyncComments(ctx, thread, second)
	require.NoError(t, err)
	assert.Equal(t, provider.CommentResult{}, res)
}
