package preview_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPullRequest_comparesWithTheMergeBaseNotTheMovedBaseBranch: main moves
// on (another service changes) after the pull request branched off; the
// pull request's older copy of that service is not a change of the pull
// request and gets no preview.
func TestPullRequest_comparesWithTheMergeBaseNotTheMovedBaseBranch(t *testing.T) {
	i := newInfra(t, "")
	manifest, err := os.ReadFile(filepath.Join(root, "services", "cart", "service.yaml"))
	require.NoError(t, err)
	i.git.CopyDir(filepath.Join(root, "services", "cart"), "services/shop")
	i.git.WriteFile("services/shop/service.yaml", strings.NewReplacer("name: cart", "name: shop", "cart-", "shop-").Replace(string(manifest)))
	forked := i.git.Commit("shop", "platform@example.com")

	head := i.pullRequest(t, 12, forked, replicas)
	i.git.WriteFile("services/shop/values-prod.yaml", "replicaCount: 9\n")
	moved := i.git.Commit("shop: more replicas", "platform@example.com")

	require.NoError(t, i.h.PullRequest(context.Background(), i.repo, githubPR(t, "opened", 12, head, moved)))
	got := byRelease(previews(t, i.repo.Namespace, 12))
	assert.Contains(t, got, "cart-prod")
	assert.Contains(t, got, "cart-staging")
	assert.NotContains(t, got, "shop-prod", "shop changed on main, not in the pull request")
	assert.NotContains(t, got, "shop-staging")
	assert.Equal(t, forked, got["cart-prod"].Spec.PreviousRevision, "computed against the merge base")
}
