package provider_test

import (
	"context"
	"testing"

	"code.gitea.io/sdk/gitea"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/giteatest"
)

// pushBranch pushes main (one file) and a branch changing it to f, as the
// author, and returns the branch's name.
func pushBranch(t *testing.T, f *giteatest.Forge) string {
	t.Helper()
	g := gittest.NewRepo(t, t.TempDir(), "infra")
	g.WriteFile("services/a.yaml", "replicas: 1\n")
	base := g.Commit("base", "author@example.com")
	g.WriteFile("services/a.yaml", "replicas: 2\n")
	head := g.Commit("two replicas", "author@example.com")
	g.SetBranch("sluice/scale", head)
	g.SetBranch("main", base)
	f.Push(t, g.GitDir, f.Author, "refs/heads/main:refs/heads/main", "refs/heads/sluice/scale:refs/heads/sluice/scale")
	return "sluice/scale"
}

// TestGitea_aPullRequestOpensWithThePodImagesPrograms is the in-cluster
// failure reproduced against a real Gitea process: Gitea with only the
// programs the pod image held before (git, the hooks' bash and tools)
// cannot open a pull request, because git runs git-receive-pack and
// git-upload-pack by name for the push to refs/pull/N/head and the merge
// test; Gitea answers 500 with an empty message to the author (no site
// admin), which the Gitea SDK returns as an error whose text is empty.
// The provider's error names the call and the status. With the programs
// of hack/gitea/pod-programs (what the image holds now) the same call
// opens it.
func TestGitea_aPullRequestOpensWithThePodImagesPrograms(t *testing.T) {
	programs, err := giteatest.PodPrograms()
	require.NoError(t, err)
	var before []string
	for _, p := range programs {
		if p != "/usr/bin/git-receive-pack" && p != "/usr/bin/git-upload-pack" && p != "/bin/sh" {
			before = append(before, p)
		}
	}
	require.Len(t, before, len(programs)-3, "the list names git-receive-pack, git-upload-pack and /bin/sh")

	t.Run("the image's programs before", func(t *testing.T) {
		f := giteatest.StartWith(t, giteatest.Options{Programs: before})
		head := pushBranch(t, f)
		_, resp, err := f.Client(t, f.Author).CreatePullRequest(giteatest.Org, giteatest.Repo, gitea.CreatePullRequestOption{Head: head, Base: "main", Title: "scale a"})
		require.Error(t, err)
		assert.Equal(t, 500, resp.StatusCode)
		assert.Empty(t, err.Error(), "the SDK's error of Gitea's hidden server error is empty: what the node showed")

		api := &provider.API{Provider: provider.Gitea, BaseURL: f.URL, Token: func(context.Context) (string, error) { return f.Author.Token, nil }}
		_, err = api.OpenPullRequest(context.Background(), provider.PullRequestOpen{Repo: f.FullName(), Head: head, Base: "main", Title: "scale a"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "open a pull request from sluice/scale into main of acme/infra: HTTP 500 with an empty message")
		assert.Contains(t, f.Logs(), "git-upload-pack: not found", "Gitea's log names the missing program")
	})

	t.Run("the image's programs now", func(t *testing.T) {
		f := giteatest.StartWith(t, giteatest.Options{Programs: programs})
		head := pushBranch(t, f)
		api := &provider.API{Provider: provider.Gitea, BaseURL: f.URL, Token: func(context.Context) (string, error) { return f.Bot.Token, nil }}
		ctx := context.Background()
		open := provider.PullRequestOpen{Repo: f.FullName(), Head: head, Base: "main", Title: "scale a", Body: "two replicas"}
		pr, err := api.OpenPullRequest(ctx, open)
		require.NoError(t, err)
		assert.False(t, pr.Existing)
		assert.Equal(t, int64(1), pr.Number)
		assert.Equal(t, f.URL+"/acme/infra/pulls/1", pr.URL)

		// Asked again (a restart): the same pull request, none opened.
		again, err := api.OpenPullRequest(ctx, open)
		require.NoError(t, err)
		assert.Equal(t, provider.OpenedPullRequest{Number: 1, URL: pr.URL, Existing: true}, again)

		// Merged: still that one, never a second.
		f.Merge(t, pr.Number)
		again, err = api.OpenPullRequest(ctx, open)
		require.NoError(t, err)
		assert.Equal(t, provider.OpenedPullRequest{Number: 1, URL: pr.URL, Existing: true}, again)
		list, _, err := f.Client(t, f.Author).ListRepoPullRequests(giteatest.Org, giteatest.Repo, gitea.ListPullRequestsOptions{State: gitea.StateAll})
		require.NoError(t, err)
		assert.Len(t, list, 1)
	})
}
