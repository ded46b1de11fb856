package preview_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/preview"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/status"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// replicas changes both environments' values files: both releases change.
var replicas = map[string]string{"services/cart/values-prod.yaml": "replicaCount: 3\n", "services/cart/values-staging.yaml": "replicaCount: 2\n"}

// prodReplicas changes only prod's values file.
var prodReplicas = map[string]string{"services/cart/values-prod.yaml": "replicaCount: 3\n"}

// TestPullRequest_aPreviewIsPerRelease: a pull request changing only
// values-prod.yaml previews cart-prod and not cart-staging, which reads
// nothing that changed.
func TestPullRequest_aPreviewIsPerRelease(t *testing.T) {
	i := newInfra(t, "")
	head := i.pullRequest(t, 6, i.base, prodReplicas)
	require.NoError(t, i.h.PullRequest(context.Background(), i.repo, githubPR(t, "opened", 6, head, i.base)))
	got := byRelease(previews(t, i.repo.Namespace, 6))
	assert.Len(t, got, 1)
	assert.Contains(t, got, "cart-prod")
}

func TestPullRequest_opensPreviewsOfTheChangedReleasesOnly(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	head := i.pullRequest(t, 7, i.base, replicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 7, head, i.base)))

	got := previews(t, i.repo.Namespace, 7)
	require.Len(t, got, 2, "both environments of cart, whose values files changed")
	cr := byRelease(got)["cart-prod"]
	require.NotNil(t, cr)
	assert.Equal(t, cr.Spec.ContentDigest, byRelease(got)["cart-staging"].Spec.ContentDigest, "the artifact carries the service's folders")
	assert.NotEqual(t, cr.Spec.ApprovalDigest, byRelease(got)["cart-staging"].Spec.ApprovalDigest, "an approval for staging never counts in prod")
	assert.Equal(t, sluicev1.PreviewChangeRequestName("cart-prod", 7, head), cr.Name)
	assert.Equal(t, &sluicev1.PullRequestRef{Number: 7, HeadSHA: head, Preview: true}, cr.Spec.PullRequest)
	assert.Equal(t, "true", cr.Labels[sluicev1.LabelPreview])
	assert.Equal(t, "7", cr.Labels[sluicev1.LabelPullRequest])
	assert.Equal(t, i.base, cr.Spec.PreviousRevision)
	assert.Equal(t, head, cr.Spec.Revision)
	assert.Contains(t, cr.Spec.Authors, sluicev1.Identity("github:codertocat"), "the PR author is an author")
	assert.Contains(t, cr.Spec.Authors, sluicev1.Identity("email:alice@example.com"))
	assert.NotEmpty(t, cr.Spec.ManifestDigest, "the chart was rendered")
	assert.Equal(t, cr.ExpectedApprovalDigest(), cr.Spec.ApprovalDigest)
	assert.Equal(t, int32(1), cr.Spec.Rule.Required)

	// A redelivery or a reopen creates nothing twice.
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "reopened", 7, head, i.base)))
	assert.Len(t, previews(t, i.repo.Namespace, 7), 2)

	// Closing deletes the previews.
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "closed", 7, head, i.base)))
	assert.Empty(t, previews(t, i.repo.Namespace, 7))
}

func TestPullRequest_forksGetPreviewsOnlyWhenTheRepositoryAllowsAll(t *testing.T) {
	for _, c := range []struct {
		policy sluicev1.PreviewPolicy
		want   int
	}{{sluicev1.PreviewsSameRepo, 0}, {"", 0}, {sluicev1.PreviewsAll, 1}} {
		t.Run("previews="+string(c.policy), func(t *testing.T) {
			i := newInfra(t, c.policy)
			head := i.pullRequest(t, 8, i.base, replicas)
			ev := githubPR(t, "opened", 8, head, i.base)
			ev.PullRequest.Fork = true
			require.NoError(t, i.h.PullRequest(context.Background(), i.repo, ev))
			got := previews(t, i.repo.Namespace, 8)
			require.Len(t, got, 2*c.want)
			if c.want > 0 {
				assert.True(t, got[0].Spec.PullRequest.Fork)
			}
		})
	}
}

func TestReview_decisionsBecomeApprovalsOfThePreviewDigest(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	ns := i.repo.Namespace
	head := i.pullRequest(t, 9, i.base, replicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 9, head, i.base)))
	pv := byRelease(previews(t, ns, 9))
	require.Len(t, pv, 2)
	api := newFakeAPI(t)
	i.h.Reviews = api.api(provider.GitHub)
	api.perms["alice"], api.perms["bob"], api.perms["mallory"] = "admin", "maintain", "read"

	// A commented review and a review without write access do nothing.
	api.review(provider.GitHub, 9, 100, "alice", "COMMENTED", head)
	api.review(provider.GitHub, 9, 101, "mallory", "APPROVED", head)
	api.review(provider.GitHub, 9, 102, "eve", "APPROVED", head)
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 9, 100, "commented", head, head, "alice", "OWNER")))
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 9, 101, "approved", head, head, "mallory", "CONTRIBUTOR")))
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 9, 102, "approved", head, head, "eve", "NONE")))
	assert.Empty(t, approvals(t, ns))

	api.review(provider.GitHub, 9, 200, "alice", "APPROVED", head)
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 9, 200, "approved", head, head, "alice", "OWNER")))
	api.review(provider.GitHub, 9, 201, "bob", "CHANGES_REQUESTED", head)
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 9, 201, "changes_requested", head, head, "bob", "MEMBER")))
	api.setState(9, 200, "DISMISSED")
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 9, 200, "dismissed", head, head, "alice", "COLLABORATOR")))
	// A redelivered approval of a dismissed review creates nothing.
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 9, 200, "approved", head, head, "alice", "OWNER")))

	got := map[string]sluicev1.ApprovalSpec{}
	for _, a := range approvals(t, ns) {
		got[a.Name] = a.Spec
	}
	want := map[string]sluicev1.ApprovalSpec{}
	for release, cr := range pv {
		for _, d := range []struct {
			id       int64
			decision sluicev1.Decision
			who      sluicev1.Identity
		}{{200, sluicev1.DecisionApprove, "github:alice"}, {201, sluicev1.DecisionReject, "github:bob"}, {200, sluicev1.DecisionRevoke, "github:alice"}} {
			want[preview.ApprovalName(release, 9, d.id, d.decision)] = sluicev1.ApprovalSpec{Release: release, ChangeRequest: cr.Name, ApprovalDigest: cr.Spec.ApprovalDigest,
				Decision: d.decision, Approver: d.who, Source: sluicev1.SourcePullRequest, PullRequest: 9, ReviewID: d.id}
		}
	}
	assert.Equal(t, want, got)

	// Closing the pull request keeps the Approvals: they may count for
	// the change of the tracked branch that merged it.
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "closed", 9, head, i.base)))
	assert.Len(t, approvals(t, ns), 6)
}

func TestReview_onAnOlderCommitNeverApprovesTheNewHead(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	ns := i.repo.Namespace
	first := i.pullRequest(t, 10, i.base, replicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 10, first, i.base)))
	second := i.pullRequest(t, 10, first, map[string]string{"services/cart/values-prod.yaml": "replicaCount: 4\n"})
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "synchronize", 10, second, i.base)))

	var firstDigest, secondDigest sluicev1.Digest
	for _, cr := range previews(t, ns, 10) {
		if cr.Spec.Release != "cart-prod" {
			continue
		}
		switch cr.Spec.Revision {
		case first:
			firstDigest = cr.Spec.ApprovalDigest
		case second:
			secondDigest = cr.Spec.ApprovalDigest
		}
	}
	require.NotEmpty(t, firstDigest)
	require.NotEmpty(t, secondDigest)
	require.NotEqual(t, firstDigest, secondDigest)

	// The review was given on the first commit while the PR is at the second.
	api := newFakeAPI(t)
	i.h.Reviews = api.api(provider.GitHub)
	api.perms["alice"] = "write"
	api.review(provider.GitHub, 10, 300, "alice", "APPROVED", first)
	require.NoError(t, i.h.Review(ctx, i.repo, githubReview(t, 10, 300, "approved", first, second, "alice", "OWNER")))
	var prod []sluicev1.Approval
	for _, a := range approvals(t, ns) {
		if a.Spec.Release == "cart-prod" {
			prod = append(prod, a)
		}
		assert.NotEqual(t, secondDigest, a.Spec.ApprovalDigest)
	}
	require.Len(t, prod, 1)
	assert.Equal(t, firstDigest, prod[0].Spec.ApprovalDigest, "the approval is for what was reviewed, never the new head")
}

func TestReview_overtakingThePullRequestEventBuildsThePreviewFirst(t *testing.T) {
	i := newInfra(t, "")
	head := i.pullRequest(t, 11, i.base, replicas)
	api := newFakeAPI(t)
	i.h.Reviews = api.api(provider.GitHub)
	api.perms["alice"] = "write"
	api.review(provider.GitHub, 11, 400, "alice", "APPROVED", head)
	require.NoError(t, i.h.Review(context.Background(), i.repo, githubReview(t, 11, 400, "approved", head, head, "alice", "OWNER")))
	pv := byRelease(previews(t, i.repo.Namespace, 11))
	require.Len(t, pv, 2)
	got := approvals(t, i.repo.Namespace)
	require.Len(t, got, 2)
	for _, a := range got {
		assert.Equal(t, pv[a.Spec.Release].Spec.ApprovalDigest, a.Spec.ApprovalDigest)
	}
}

func TestGitea_reviewerAccessIsAskedAndVerdictsArePostedAsStatuses(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	ns := i.repo.Namespace
	api := newFakeAPI(t)
	api.perms["bob"], api.perms["carol"] = "write", "read"
	cl, err := status.New(provider.Gitea, api.URL, "gitea-token")
	require.NoError(t, err)
	i.h.Statuses, i.h.Reviews = cl, api.api(provider.Gitea)

	head := i.pullRequest(t, 3, i.base, replicas)
	api.review(provider.Gitea, 3, 7, "carol", "APPROVED", head)
	api.review(provider.Gitea, 3, 8, "bob", "APPROVED", head)
	retarget := func(m map[string]any) {
		pr := m["pull_request"].(map[string]any)
		pr["head"].(map[string]any)["sha"] = head
		pr["base"].(map[string]any)["sha"] = i.base
		delete(pr, "merge_base")
	}
	ev, err := provider.ParseGitea("pull_request", "g1", providertest.Edit(t, providertest.Payload(t, "gitea/pull_request.opened.json"), retarget))
	require.NoError(t, err)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, ev))
	require.Len(t, previews(t, ns, 3), 2)
	require.Len(t, api.statuses, 2)
	contexts := map[string]map[string]string{}
	for _, st := range api.statuses {
		contexts[st["context"]] = st
		assert.Equal(t, "/api/v1/repos/platform/infra/statuses/"+head, st["path"])
		assert.NotContains(t, st["description"], "gitea-token")
	}
	// cart-prod warns (no PodDisruptionBudget in production): a warning
	// does not fail the status, and the summary says so. Nothing of cart
	// was applied yet, so every object is new: medium, as the merge's change
	// will be rated.
	require.Contains(t, contexts, "sluice/cart-prod")
	assert.Equal(t, "success", contexts["sluice/cart-prod"]["state"])
	assert.Equal(t, "warn, risk medium; 1 warn", contexts["sluice/cart-prod"]["description"])
	assert.Equal(t, "pass, risk medium", contexts["sluice/cart-staging"]["description"])

	for _, who := range []string{"carol", "bob"} {
		body := providertest.Edit(t, providertest.Payload(t, "gitea/pull_request_approved.json"), func(m map[string]any) {
			retarget(m)
			m["sender"].(map[string]any)["login"] = who
		})
		ev, err := provider.ParseGitea("pull_request_approved", "g-"+who, body)
		require.NoError(t, err)
		require.NoError(t, i.h.Review(ctx, i.repo, ev))
	}
	got := approvals(t, ns)
	require.Len(t, got, 2, "carol may only read; bob's review approves both previews")
	for _, a := range got {
		assert.Equal(t, sluicev1.Identity("gitea:bob"), a.Spec.Approver)
		assert.EqualValues(t, 8, a.Spec.ReviewID, "Gitea's own review id, so a redelivery maps to the same Approval")
	}
}

func byRelease(crs []sluicev1.ChangeRequest) map[string]*sluicev1.ChangeRequest {
	out := map[string]*sluicev1.ChangeRequest{}
	for i := range crs {
		out[crs[i].Spec.Release] = &crs[i]
	}
	return out
}
