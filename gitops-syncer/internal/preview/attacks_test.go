package preview_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func identities(ids []sluicev1.Identity) []string {
	out := []string{}
	for _, id := range ids {
		out = append(out, string(id))
	}
	return out
}

// TestReview_aReadOnlyOrganisationMemberNeverApproves: GitHub says MEMBER
// for every member of the organisation, read-only ones too. Mallory, who
// may only read the repository, approves the pull request: GitHub's
// permission API says "read", so no Approval is made.
func TestReview_aReadOnlyOrganisationMemberNeverApproves(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	head := i.pullRequest(t, 20, i.base, replicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 20, head, i.base)))
	require.Len(t, previews(t, i.repo.Namespace, 20), 2)
	api := newFakeAPI(t)
	i.h.Reviews = api.api(provider.GitHub)
	api.perms["mallory"] = "read"
	api.review(provider.GitHub, 20, 700, "mallory", "APPROVED", head)

	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 20, 700, "approved", head, head, "mallory", "MEMBER")))
	assert.Empty(t, approvals(t, i.repo.Namespace))

	// Without a provider API nothing is trusted either.
	i.h.Reviews = nil
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 20, 700, "approved", head, head, "mallory", "OWNER")))
	assert.Empty(t, approvals(t, i.repo.Namespace))
}

// TestReview_onlyTheReviewersLatestStateCounts: alice approved, then asked
// for changes; the old approval replayed (a new delivery id) approves
// nothing, since GitHub lists her later review as her state.
func TestReview_onlyTheReviewersLatestStateCounts(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	head := i.pullRequest(t, 21, i.base, replicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 21, head, i.base)))
	api := newFakeAPI(t)
	i.h.Reviews = api.api(provider.GitHub)
	api.perms["alice"] = "write"
	api.review(provider.GitHub, 21, 800, "alice", "APPROVED", head)
	api.review(provider.GitHub, 21, 801, "alice", "CHANGES_REQUESTED", head)

	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 21, 800, "approved", head, head, "alice", "OWNER")))
	assert.Empty(t, approvals(t, i.repo.Namespace))
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 21, 801, "changes_requested", head, head, "alice", "OWNER")))
	assert.Len(t, approvals(t, i.repo.Namespace), 2, "her latest review, a rejection, counts for both previews")
}

// TestPullRequest_previewsRecordTheAuthorAndEveryPusher: the pull
// request's author and the sender of each push to it are recorded as
// provider identities, whatever e-mails the commits claim, so the gate's
// author exclusion can find them.
func TestPullRequest_previewsRecordTheAuthorAndEveryPusher(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	ns := i.repo.Namespace
	first := i.pullRequest(t, 22, i.base, replicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 22, first, i.base)))
	second := i.pullRequest(t, 22, first, map[string]string{"services/cart/values-prod.yaml": "replicaCount: 5\n"})
	ev := githubPR(t, "synchronize", 22, second, i.base)
	ev.PullRequest.Sender = "github:mallory"
	require.NoError(t, i.h.PullRequest(ctx, i.repo, ev))

	for _, cr := range previews(t, ns, 22) {
		assert.Equal(t, "github:codertocat", string(cr.Spec.PullRequestAuthor), cr.Name)
		switch cr.Spec.Revision {
		case first:
			assert.Equal(t, []string{"github:codertocat"}, identities(cr.Spec.Pushers))
		case second:
			assert.Equal(t, []string{"github:codertocat", "github:mallory"}, identities(cr.Spec.Pushers), "every pusher so far")
		}
	}
}
