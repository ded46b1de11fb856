package preview_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestGitLab_mergeRequestHeadRefApprovalAndUnapproval: GitLab's merge
// request head ref is fetched, an approval approves the preview and an
// unapproval revokes it.
func TestGitLab_mergeRequestHeadRefApprovalAndUnapproval(t *testing.T) {
	i := newInfra(t, "")
	ctx := context.Background()
	ns := i.repo.Namespace
	head := i.pullRequest(t, 1, i.base, prodReplicas)
	// GitLab serves merge request heads under refs/merge-requests/N/head.
	i.setRef(t, "refs/merge-requests/1/head", head)
	i.setRef(t, "refs/pull/1/head", i.base)

	mr := func(fix, delivery string) *provider.Event {
		body := edit(t, fixture(t, fix), func(m map[string]any) {
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

	require.NoError(t, i.h.Review(ctx, i.repo, mr("gitlab/merge_request.approval.json", "l-approve")))
	require.NoError(t, i.h.Review(ctx, i.repo, mr("gitlab/merge_request.unapproval.json", "l-unapprove")))
	got := map[string]bool{}
	for _, a := range approvals(t, ns) {
		assert.Equal(t, pv[a.Spec.Release].Spec.ApprovalDigest, a.Spec.ApprovalDigest)
		assert.Equal(t, sluicev1.Identity("gitlab:bob"), a.Spec.Approver)
		got[fmt.Sprintf("%s %s", a.Spec.Release, a.Spec.Decision)] = true
	}
	assert.Equal(t, map[string]bool{"cart-prod approve": true, "cart-staging approve": true, "cart-prod revoke": true, "cart-staging revoke": true}, got)

	require.NoError(t, i.h.PullRequest(ctx, i.repo, mr("gitlab/merge_request.merge.json", "l-merge")))
	assert.Empty(t, previews(t, ns, 1))
}
