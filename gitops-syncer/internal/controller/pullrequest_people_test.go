package controller_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestSync_aMergedPullRequestsAuthorAndPushersAreRecorded: mallory opened
// a pull request and pushed to it, with commits claiming someone else's
// e-mail. When it is merged (its head enters main's history), the merge's
// ChangeRequest records her as the pull request's author, among the
// pushers and the authors, so allowAuthor: false can exclude her; the
// merged pull request's previews are then deleted.
func TestSync_aMergedPullRequestsAuthorAndPushersAreRecorded(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	first := fixture.Head("main")
	waitHandled(t, repo, requestReconcile(t, repo))
	cr := changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", first, 1)]
	require.NotEmpty(t, cr.Name)

	// The pull request's head, on a branch of its own.
	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"6.6.6\"\nreplicaCount: 1\n")
	head := fixture.Commit("innocent bump", "alice@example.com")
	fixture.SetBranch("main", first)

	// Its preview, as the preview handler records it.
	preview := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.PreviewChangeRequestName("alpha-staging", 5, head), Namespace: ns, Labels: map[string]string{
			sluicev1.LabelRepository: "infra", sluicev1.LabelRelease: "alpha-staging", sluicev1.LabelPreview: "true", sluicev1.LabelPullRequest: "5"}},
		Spec: cr.Spec,
	}
	preview.Spec.Revision, preview.Spec.PreviousRevision = head, first
	preview.Spec.PullRequest = &sluicev1.PullRequestRef{Number: 5, HeadSHA: head, Preview: true}
	preview.Spec.PullRequestAuthor = "github:mallory"
	preview.Spec.Pushers = []sluicev1.Identity{"github:mallory", "github:mallory-bot"}
	require.NoError(t, k8s.Create(ctx, preview))

	// Merged (fast-forward): main moves to the head.
	fixture.SetBranch("main", head)
	waitHandled(t, repo, requestReconcile(t, repo))
	merged := changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", head, 1)]
	require.NotEmpty(t, merged.Name)
	assert.Nil(t, merged.Spec.PullRequest, "a change of the branch, not a preview")
	assert.Equal(t, []int64{5}, merged.Spec.MergedPullRequests, "approvals given on the pull request's previews count for the change that merged it")
	assert.Equal(t, sluicev1.Identity("github:mallory"), merged.Spec.PullRequestAuthor)
	assert.Equal(t, []sluicev1.Identity{"github:mallory", "github:mallory-bot"}, merged.Spec.Pushers)
	assert.Contains(t, merged.Spec.Authors, sluicev1.Identity("github:mallory"))
	assert.Contains(t, merged.Spec.Authors, sluicev1.Identity("email:alice@example.com"))

	require.Eventually(t, func() bool {
		return apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKeyFromObject(preview), &sluicev1.ChangeRequest{}))
	}, time.Minute, 50*time.Millisecond, "the merged pull request's preview is deleted once recorded")
}
