package provider_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/giteatest"
	reviewmd "github.com/sluice-gitops/sluice/infra-validator/pkg/review"
)

// delivery is one webhook request as a real Gitea sent it.
type delivery struct {
	header http.Header
	body   []byte
}

// recorder is a webhook receiver that keeps every delivery.
type recorder struct {
	*httptest.Server
	mu   sync.Mutex
	got  []delivery
	seen chan struct{}
}

func newRecorder(t *testing.T) *recorder {
	r := &recorder{seen: make(chan struct{}, 100)}
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.got = append(r.got, delivery{header: req.Header.Clone(), body: body})
		r.mu.Unlock()
		w.WriteHeader(http.StatusAccepted)
	}))
	t.Cleanup(r.Close)
	return r
}

// wait returns the first delivery (in arrival order) for which match
// holds, waiting for it.
func (r *recorder) wait(t *testing.T, what string, match func(d delivery) bool) delivery {
	t.Helper()
	var found delivery
	require.Eventually(t, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, d := range r.got {
			if match(d) {
				found = d
				return true
			}
		}
		return false
	}, 2*time.Minute, 20*time.Millisecond, "Gitea sent no %s delivery", what)
	return found
}

// parse verifies and parses a delivery as the receiver does.
func parse(t *testing.T, d delivery, secret []byte) *provider.Event {
	t.Helper()
	p, err := provider.Detect(d.header)
	require.NoError(t, err)
	require.Equal(t, provider.Gitea, p)
	require.NoError(t, provider.Verify(p, d.header, d.body, secret), "Gitea's signature verifies with the hook's secret")
	require.ErrorIs(t, provider.Verify(p, d.header, d.body, []byte("another-secret")), provider.ErrSignature, "and not with another")
	ev, err := provider.Parse(p, d.header, d.body)
	require.NoError(t, err)
	return ev
}

func event(name string) func(d delivery) bool {
	return func(d delivery) bool { return d.header.Get("X-Gitea-Event") == name }
}

// prAction matches a pull_request delivery with the body's action.
func prAction(action string) func(d delivery) bool {
	return func(d delivery) bool {
		var b struct {
			Action string `json:"action"`
		}
		return event("pull_request")(d) && json.Unmarshal(d.body, &b) == nil && b.Action == action
	}
}

// TestGitea_realDeliveriesParseAndTheAPIConfirmsOnlyACollaboratorsApproval
// drives a real Gitea through a push, a pull request, an update of it,
// reviews by a write collaborator and by an outsider, and a merge, and
// parses each signed delivery as the receiver does; the provider's API
// calls (review confirmation, comments, commit statuses) run against it.
func TestGitea_realDeliveriesParseAndTheAPIConfirmsOnlyACollaboratorsApproval(t *testing.T) {
	f := giteatest.Start(t)
	ctx := context.Background()
	rec := newRecorder(t)
	secret := []byte("gitea-hook-secret")
	f.Hook(t, rec.URL+"/hook", string(secret))

	g := gittest.NewRepo(t, t.TempDir(), "infra")
	g.WriteFile("README.md", "infra\n")
	base := g.Commit("base", "author@example.com")
	f.Push(t, g.GitDir, f.Author, "refs/heads/main:refs/heads/main")

	// The push: ref, commits and the pusher Gitea authenticated.
	push := parse(t, rec.wait(t, "push", event("push")), secret)
	require.Equal(t, provider.KindPush, push.Kind)
	assert.Equal(t, f.FullName(), push.Repo)
	assert.Equal(t, "refs/heads/main", push.Push.Ref)
	assert.Equal(t, base, push.Push.After)
	assert.Equal(t, "gitea:author", push.Push.Pusher)
	assert.NotEmpty(t, push.DeliveryID)

	// A pull request from a branch of the same repository.
	g.WriteFile("services/a.yaml", "replicas: 1\n")
	h1 := g.Commit("first", "author@example.com")
	g.SetBranch("feature", h1)
	g.SetBranch("main", base)
	f.Push(t, g.GitDir, f.Author, "refs/heads/feature:refs/heads/feature")
	pr := f.OpenPullRequest(t, "feature", "scale a")
	opened := parse(t, rec.wait(t, "pull_request opened", prAction("opened")), secret)
	require.Equal(t, provider.KindPullRequest, opened.Kind)
	assert.Equal(t, provider.PROpened, opened.PullRequest.Action)
	assert.Equal(t, pr.Index, opened.PullRequest.Number)
	assert.Equal(t, h1, opened.PullRequest.HeadSHA)
	assert.Equal(t, "refs/heads/main", opened.PullRequest.BaseRef)
	assert.Equal(t, base, opened.PullRequest.BaseSHA)
	assert.False(t, opened.PullRequest.Fork)
	assert.Equal(t, "gitea:author", opened.PullRequest.Author)
	// The head ref the syncer fetches exists on Gitea's git server.
	assert.Equal(t, "refs/pull/1/head", opened.PullRequest.HeadRef)

	// A new commit on the branch: Gitea's "synchronized".
	g.SetBranch("feature", h1)
	g.WriteFile("services/a.yaml", "replicas: 2\n")
	h2 := g.Commit("second", "author@example.com")
	g.SetBranch("main", base)
	f.Push(t, g.GitDir, f.Author, "refs/heads/feature:refs/heads/feature")
	synced := parse(t, rec.wait(t, "pull_request synchronized", prAction("synchronized")), secret)
	assert.Equal(t, provider.PRUpdated, synced.PullRequest.Action)
	assert.Equal(t, h2, synced.PullRequest.HeadSHA)

	api := &provider.API{Provider: provider.Gitea, BaseURL: f.URL, Token: func(context.Context) (string, error) { return f.Bot.Token, nil }}

	// The author cannot approve their own pull request: Gitea refuses.
	_, resp, err := f.Client(t, f.Author).CreatePullReview(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, CommitID: h2})
	require.Error(t, err)
	require.Equal(t, http.StatusUnprocessableEntity, resp.StatusCode)

	// An outsider (read access, as to any public repository) approves:
	// the payload parses as a review, and the API does not confirm it.
	_, _, err = f.Client(t, f.Outsider).CreatePullReview(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "looks fine to me", CommitID: h2})
	require.NoError(t, err)
	outsider := parse(t, rec.wait(t, "outsider's review", func(d delivery) bool {
		return event("pull_request_approved")(d) && bytes.Contains(d.body, []byte(`"outsider"`))
	}), secret)
	require.Equal(t, provider.KindReview, outsider.Kind)
	assert.Equal(t, "gitea:outsider", outsider.Review.Reviewer)
	_, err = api.Confirm(ctx, outsider)
	require.ErrorIs(t, err, provider.ErrUnconfirmed, "an outsider's approval is not confirmed")

	// The approver, a write collaborator, approves the head: confirmed,
	// with Gitea's own review id and the reviewed commit.
	approval, _, err := f.Client(t, f.Approver).CreatePullReview(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "lgtm", CommitID: h2})
	require.NoError(t, err)
	approved := parse(t, rec.wait(t, "approver's review", func(d delivery) bool {
		return event("pull_request_approved")(d) && bytes.Contains(d.body, []byte(`"approver"`))
	}), secret)
	require.Equal(t, provider.KindReview, approved.Kind)
	assert.Equal(t, provider.ReviewApproved, approved.Review.State)
	assert.Equal(t, "gitea:approver", approved.Review.Reviewer)
	assert.Equal(t, h2, approved.Review.CommitSHA)
	assert.Equal(t, "lgtm", approved.Review.Body)
	assert.Equal(t, provider.AccessUnknown, approved.Review.Access, "a payload is a claim")
	confirmed, err := api.Confirm(ctx, approved)
	require.NoError(t, err)
	assert.Equal(t, provider.AccessWrite, confirmed.Access)
	assert.Equal(t, approval.ID, confirmed.ID, "the Approval is keyed by Gitea's review id")
	assert.Equal(t, h2, confirmed.CommitSHA)

	// Changes requested by the approver afterwards: the earlier approval is
	// no longer the approver's latest decision.
	_, _, err = f.Client(t, f.Approver).CreatePullReview(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateRequestChanges, Body: "wait", CommitID: h2})
	require.NoError(t, err)
	rejected := parse(t, rec.wait(t, "approver's rejection", event("pull_request_rejected")), secret)
	assert.Equal(t, provider.ReviewChangesRequested, rejected.Review.State)
	_, err = api.Confirm(ctx, approved)
	require.ErrorIs(t, err, provider.ErrUnconfirmed, "a replay of the approval after a rejection")
	_, err = api.Confirm(ctx, rejected)
	require.NoError(t, err)

	// The review comment: created, then edited in place, never duplicated.
	thread := provider.Thread{Repo: f.FullName(), Number: pr.Index}
	first := reviewmd.Markdown([]*reviewmd.Section{{Release: "cart-prod", Verdict: "pass", Risk: "low"}}, api.CommentLimit(), 5)
	res, err := api.SyncComments(ctx, thread, first)
	require.NoError(t, err)
	assert.Equal(t, provider.CommentResult{Created: len(first)}, res)
	second := reviewmd.Markdown([]*reviewmd.Section{{Release: "cart-prod", Verdict: "fail", Risk: "high"}}, api.CommentLimit(), 5)
	res, err = api.SyncComments(ctx, thread, second)
	require.NoError(t, err)
	assert.Equal(t, provider.CommentResult{Edited: 1}, res)
	comments, _, err := f.Client(t, f.Author).ListIssueComments(giteatest.Org, giteatest.Repo, pr.Index, gitea.ListIssueCommentOptions{})
	require.NoError(t, err)
	require.Len(t, comments, 1)
	assert.Equal(t, second[0], comments[0].Body)
	assert.Equal(t, f.Bot.Name, comments[0].Poster.UserName)
	// Gitea announces the comment as an issue_comment, which the parser
	// leaves alone (it is Sluice's own).
	ic := parse(t, rec.wait(t, "issue_comment", event("issue_comment")), secret)
	assert.Equal(t, provider.KindIgnored, ic.Kind)

	// A commit status on the head.
	require.NoError(t, api.PostStatus(ctx, provider.CommitStatus{Repo: f.FullName(), SHA: h2, Context: "sluice/cart-prod", State: "failure", Description: "fail: risk high"}))
	st, _, err := f.Client(t, f.Author).GetCombinedStatus(giteatest.Org, giteatest.Repo, h2)
	require.NoError(t, err)
	require.Len(t, st.Statuses, 1)
	assert.Equal(t, gitea.StatusFailure, st.Statuses[0].State)
	assert.Equal(t, "sluice/cart-prod", st.Statuses[0].Context)
	assert.Equal(t, "fail: risk high", st.Statuses[0].Description)

	// The approver approves again and the author merges: the closed event
	// carries the merge commit, and the push of main follows.
	_, _, err = f.Client(t, f.Approver).CreatePullReview(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, CommitID: h2})
	require.NoError(t, err)
	merge := f.Merge(t, pr.Index)
	closed := parse(t, rec.wait(t, "pull_request closed", prAction("closed")), secret)
	assert.Equal(t, provider.PRClosed, closed.PullRequest.Action)
	assert.True(t, closed.PullRequest.Merged)
	assert.Equal(t, merge, closed.PullRequest.MergeCommitSHA)
	assert.Equal(t, h2, closed.PullRequest.HeadSHA)
	merged := parse(t, rec.wait(t, "push of the merge", func(d delivery) bool {
		return event("push")(d) && bytes.Contains(d.body, []byte(merge))
	}), secret)
	assert.Equal(t, merge, merged.Push.After)
	assert.Equal(t, "refs/heads/main", merged.Push.Ref)

	// Comments on a closed pull request are left alone.
	res, err = api.SyncComments(ctx, thread, first)
	require.NoError(t, err)
	assert.True(t, res.Closed)
}
