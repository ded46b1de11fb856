package preview_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestGitLab_mergeRequestHeadRefApprovalAndUnapproval: GitLab's merge
// request head ref is fetched, an approval approves the preview and an
// unapproval revokes it; a replayed "approved" event with a new delivery id
// after the unapproval approves nothing (GitLab's approvals API decides).
func TestGitLab_mergeRequestHeadRefApprovalAndUnapproval(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	ns := i.repo.Namespace
	head := i.pullRequest(t, 1, i.base, replicas)
	// GitLab serves merge request heads under refs/merge-requests/N/head.
	i.setRef(t, "refs/merge-requests/1/head", head)
	i.setRef(t, "refs/pull/1/head", i.base)

	mr := func(fix, delivery string) *provider.Event {
		body := providertest.Edit(t, providertest.Payload(t, fix), func(m map[string]any) {
			m["object_attributes"].(map[string]any)["last_commit"].(map[string]any)["id"] = head
		})
		ev, err := provider.ParseGitLab("Merge Request Hook", delivery, body)
		require.NoError(t, err)
		return ev
	}
	require.NoError(t, i.h.PullRequest(ctx, i.repo, mr("gitlab/merge_request.open.json", "l-open")))
	pv := byRelease(previews(t, ns, 1))
	require.Len(t, pv, 2)
	assert.Equal(t, head, pv["cart-prod"].Spec.Revision)

	api := newFakeAPI(t)
	i.h.Reviews = api.api(provider.GitLab)
	api.glAccess[5], api.glSHA = provider.GitLabDeveloper, head // bob, user 5 in the fixtures

	api.setApprovedBy(5)
	require.NoError(t, i.h.Review(ctx, i.repo, mr("gitlab/merge_request.approval.json", "l-approve")))
	api.setApprovedBy()
	require.NoError(t, i.h.Review(ctx, i.repo, mr("gitlab/merge_request.unapproval.json", "l-unapprove")))
	// The attack: the old "approved" delivery replayed with a new delivery
	// id. GitLab's approvals API no longer lists bob: nothing is approved.
	require.NoError(t, i.h.Review(ctx, i.repo, mr("gitlab/merge_request.approval.json", "l-approve-replayed")))
	got := map[string]bool{}
	require.Len(t, approvals(t, ns), 4, "one approve and one revoke per preview; the replay adds nothing")
	for _, a := range approvals(t, ns) {
		assert.Equal(t, pv[a.Spec.Release].Spec.ApprovalDigest, a.Spec.ApprovalDigest)
		assert.Equal(t, sluicev1.Identity("gitlab:bob"), a.Spec.Approver)
		got[fmt.Sprintf("%s %s", a.Spec.Release, a.Spec.Decision)] = true
	}
	assert.Equal(t, map[string]bool{"cart-prod approve": true, "cart-staging approve": true, "cart-prod revoke": true, "cart-staging revoke": true}, got)

	require.NoError(t, i.h.PullRequest(ctx, i.repo, mr("gitlab/merge_request.merge.json", "l-merge")))
	assert.Empty(t, previews(t, ns, 1))
}

// TestGitLab_approvalsNeedTheConfiguredAccessLevel: an approval by a
// member below the configured level (Reporter, 20), or by a user who is no
// member, approves nothing, whatever the event says.
func TestGitLab_approvalsNeedTheConfiguredAccessLevel(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	head := i.pullRequest(t, 1, i.base, replicas)
	i.setRef(t, "refs/merge-requests/1/head", head)
	body := providertest.Edit(t, providertest.Payload(t, "gitlab/merge_request.approval.json"), func(m map[string]any) {
		m["object_attributes"].(map[string]any)["last_commit"].(map[string]any)["id"] = head
	})
	api := newFakeAPI(t)
	i.h.Reviews = api.api(provider.GitLab)
	api.glSHA = head
	api.setApprovedBy(5)
	for _, level := range []int{0, 20} {
		if level > 0 {
			api.glAccess[5] = level
		}
		ev, err := provider.ParseGitLab("Merge Request Hook", fmt.Sprintf("l-%d", level), body)
		require.NoError(t, err)
		require.NoError(t, i.h.Review(ctx, i.repo, ev))
	}
	assert.Empty(t, approvals(t, i.repo.Namespace))
}
