package controller_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/giteatest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// forgeRepo is the fixture repository, held by a real Gitea.
type forgeRepo struct {
	f       *giteatest.Forge
	fixture *gittest.Repo
}

// commit commits the fixture's worktree and pushes main to Gitea.
func (r forgeRepo) commit(t *testing.T, msg, email string) string {
	t.Helper()
	sha := r.fixture.Commit(msg, email)
	r.f.Push(t, r.fixture.GitDir, r.f.Author, "+refs/heads/main:refs/heads/main")
	return sha
}

// pull fetches Gitea's main into the fixture and checks sha out there.
func (r forgeRepo) pull(t *testing.T, sha string) {
	t.Helper()
	out, err := exec.Command("git", "--git-dir", r.fixture.GitDir, "fetch", "-q", r.f.CloneURL(), "+refs/heads/main:refs/heads/main").CombinedOutput()
	require.NoError(t, err, "%s", out)
	r.fixture.SetBranch("main", sha)
}

// withForge gives the syncer Gitea's API, as a configured status provider
// does (the bot's token).
func withForge(f *giteatest.Forge) func(*syncer.Syncer) {
	return func(s *syncer.Syncer) {
		s.Reconciler.Forge = &provider.API{Provider: provider.Gitea, BaseURL: f.URL, Token: func(context.Context) (string, error) { return f.Bot.Token, nil }}
	}
}

// waitAnnotated waits for the rollback of of on release and returns it once
// it carries key.
func waitAnnotated(t *testing.T, ns, release, of, key string) sluicev1.ChangeRequest {
	t.Helper()
	name := sluicev1.RollbackChangeRequestName(release, of, 1)
	var rb sluicev1.ChangeRequest
	require.Eventually(t, func() bool {
		var ok bool
		rb, ok = changeRequests(t, ns)[name]
		return ok && rb.Annotations[key] != ""
	}, 2*time.Minute, 50*time.Millisecond, "rollback %s has no %s annotation (annotations %v)", name, key, rb.Annotations)
	return rb
}

// TestRevert_aFailedVerificationGetsOneRevertPullRequest: against a real
// Gitea, a rollback of a failed change opens one pull request from
// sluice/revert-<failed change> whose diff reverts the failed commit
// (its only file back to the verified content), linked from the rollback
// ChangeRequest; a restarted syncer opens no second one; once it is
// merged, the branch holds the verified content again and the syncer's
// next pass proposes nothing new for the release (git and the cluster
// agree). A second failed change whose file a later commit changed
// again gets no pull request, and the rollback says why.
func TestRevert_aFailedVerificationGetsOneRevertPullRequest(t *testing.T) {
	f := giteatest.Start(t)
	ns := newNamespace(t)
	r := forgeRepo{f: f, fixture: seedHelmRepo(t, t.TempDir(), "infra")}
	f.Push(t, r.fixture.GitDir, f.Author, "+refs/heads/main:refs/heads/main")
	s := startSyncer(t, ns, "", withForge(f))
	repo := newRepository(t, ns, "infra", f.CloneURL())
	author := f.Client(t, f.Author)

	// alpha: v1 verified, v2 (a new image tag) applied and failed.
	first := r.fixture.Head("main")
	waitHandled(t, repo, requestReconcile(t, repo))
	v1 := changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", first, 1)]
	require.NotEmpty(t, v1.Name)
	markAppliedIn(t, ns, v1, "alpha-staging")
	setPhase(t, &v1, sluicev1.PhaseVerified)
	r.fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"2.0.0\"\nreplicaCount: 1\n")
	second := r.commit(t, "alpha 2.0.0", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	v2 := changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", second, 1)]
	require.NotEmpty(t, v2.Name)
	markAppliedIn(t, ns, v2, "alpha-staging")
	setPhase(t, &v2, sluicev1.PhaseVerificationFailed)

	start := time.Now()
	askRollback(t, ns, "alpha-staging", v2.Name, v1.Name)
	rb := waitAnnotated(t, ns, "alpha-staging", v2.Name, sluicev1.AnnotationRevertPullRequest)
	t.Logf("rollback %s and its revert pull request %s %s after the request", rb.Name, rb.Annotations[sluicev1.AnnotationRevertPullRequest], time.Since(start).Round(time.Millisecond))
	all, _, err := author.ListRepoPullRequests(giteatest.Org, giteatest.Repo, gitea.ListPullRequestsOptions{State: gitea.StateAll})
	require.NoError(t, err)
	require.Len(t, all, 1)
	pr := all[0]
	assert.Equal(t, pr.HTMLURL, rb.Annotations[sluicev1.AnnotationRevertPullRequest])
	assert.Equal(t, "sluice/revert-"+v2.Name, pr.Head.Ref)
	assert.Equal(t, "main", pr.Base.Ref)
	assert.Equal(t, f.Bot.Name, pr.Poster.UserName)
	assert.Contains(t, pr.Body, "reverts commit "+second)

	// Its diff is the failed commit's, reversed: one file, back to v1's.
	files, _, err := author.ListPullRequestFiles(giteatest.Org, giteatest.Repo, pr.Index, gitea.ListPullRequestFilesOptions{})
	require.NoError(t, err)
	require.Len(t, files, 1)
	assert.Equal(t, "services/alpha/values.yaml", files[0].Filename)
	atV1, _, err := author.GetFile(giteatest.Org, giteatest.Repo, first, "services/alpha/values.yaml")
	require.NoError(t, err)
	onBranch, _, err := author.GetFile(giteatest.Org, giteatest.Repo, pr.Head.Sha, "services/alpha/values.yaml")
	require.NoError(t, err)
	assert.Equal(t, string(atV1), string(onBranch))
	commit, _, err := author.GetSingleCommit(giteatest.Org, giteatest.Repo, pr.Head.Sha)
	require.NoError(t, err)
	require.Len(t, commit.Parents, 1)
	assert.Equal(t, second, commit.Parents[0].SHA, "on the branch head")

	// A restarted syncer, asked again, opens nothing more.
	s.stop()
	startSyncer(t, ns, "", withForge(f))
	waitHandled(t, repo, requestReconcile(t, repo))
	all, _, err = author.ListRepoPullRequests(giteatest.Org, giteatest.Repo, gitea.ListPullRequestsOptions{State: gitea.StateAll})
	require.NoError(t, err)
	assert.Len(t, all, 1, "a restart opened another pull request")

	// The rollback applies (as the operator would), then the revert is
	// merged: main holds v1's content, and the next pass finds the
	// release unchanged from what is applied: no new change, git and the
	// cluster agree.
	markAppliedIn(t, ns, rb, "alpha-staging")
	setPhase(t, &rb, sluicev1.PhaseApplied)
	merge := f.Merge(t, pr.Index)
	r.pull(t, merge) // the fixture follows Gitea's main
	onMain, _, err := author.GetFile(giteatest.Org, giteatest.Repo, merge, "services/alpha/values.yaml")
	require.NoError(t, err)
	assert.Equal(t, string(atV1), string(onMain))
	got := waitHandled(t, repo, requestReconcile(t, repo))
	require.Equal(t, merge, got.Status.LastSyncedCommit)
	for _, cr := range changeRequests(t, ns) {
		assert.False(t, cr.Spec.Release == "alpha-staging" && cr.Spec.Revision == merge, "the merge of the revert made change %s", cr.Name)
	}
	synced := meta.FindStatusCondition(getRelease(t, ns, "alpha-staging").Status.Conditions, sluicev1.ConditionSynced)
	require.NotNil(t, synced)
	assert.Equal(t, sluicev1.ReasonUnchanged, synced.Reason, synced.Message)
	t.Logf("after the merge of the revert: %s", synced.Message)

	// beta: v2 fails, and a later commit changes the same file before
	// the rollback: the revert does not apply, and the rollback says so.
	b1 := changeRequests(t, ns)[sluicev1.ChangeRequestName("beta-staging", first, 1)]
	require.NotEmpty(t, b1.Name)
	markAppliedIn(t, ns, b1, "beta-staging")
	setPhase(t, &b1, sluicev1.PhaseVerified)
	r.fixture.WriteFile("services/beta/values.yaml", "image:\n  repository: ghcr.io/example/beta\n  tag: \"2.0.0\"\nreplicaCount: 1\n")
	bad := r.commit(t, "beta 2.0.0", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	b2 := changeRequests(t, ns)[sluicev1.ChangeRequestName("beta-staging", bad, 1)]
	require.NotEmpty(t, b2.Name)
	markAppliedIn(t, ns, b2, "beta-staging")
	setPhase(t, &b2, sluicev1.PhaseVerificationFailed)
	r.fixture.WriteFile("services/beta/values.yaml", "image:\n  repository: ghcr.io/example/beta\n  tag: \"2.0.1\"\nreplicaCount: 1\n")
	r.commit(t, "beta 2.0.1", "alice@example.com")
	askRollback(t, ns, "beta-staging", b2.Name, b1.Name)
	brb := waitAnnotated(t, ns, "beta-staging", b2.Name, sluicev1.AnnotationRevertDeclined)
	why := brb.Annotations[sluicev1.AnnotationRevertDeclined]
	assert.True(t, strings.HasPrefix(why, "no revert pull request of "+b2.Name+": the revert of "+bad[:10]), why)
	assert.Contains(t, why, "changed since: services/beta/values.yaml")
	all, _, err = author.ListRepoPullRequests(giteatest.Org, giteatest.Repo, gitea.ListPullRequestsOptions{State: gitea.StateAll})
	require.NoError(t, err)
	assert.Len(t, all, 1, "no pull request for the revert that does not apply")
}
