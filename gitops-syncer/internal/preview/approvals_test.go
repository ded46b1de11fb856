package preview_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/preview"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// startRefresher runs the CommentRefresher of i's handler in a manager
// watching i's namespace.
func startRefresher(t *testing.T, i *infra) {
	t.Helper()
	mgr, err := ctrl.NewManager(env.Config, ctrl.Options{
		Scheme:     env.Scheme,
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Cache:      cache.Options{DefaultNamespaces: map[string]cache.Config{i.repo.Namespace: {}}},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	require.NoError(t, err)
	require.NoError(t, (&preview.CommentRefresher{Client: mgr.GetClient(), Handler: i.h}).SetupWithManager(mgr))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := mgr.Start(ctx); err != nil {
			t.Error("manager:", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	syncCtx, stop := context.WithTimeout(ctx, time.Minute)
	defer stop()
	require.True(t, mgr.GetCache().WaitForCacheSync(syncCtx), "the refresher's cache syncs")
}

// TestApprovals_theCommentFollowsApprovalsBetweenPushes: the operator
// records an approval on the preview (no push): the comment is edited to
// name the approver and need no more; a status change that leaves the
// approval state alone edits nothing; the approval revoked, the comment
// says so again.
func TestApprovals_theCommentFollowsApprovalsBetweenPushes(t *testing.T) {
	i := newInfra(t, "")
	g := withComments(t, i)
	startRefresher(t, i)
	ctx := context.Background()

	head := i.pullRequest(t, 40, i.base, prodReplicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 40, head, i.base)))
	i.h.WaitComments()
	require.Len(t, g.bodies(), 1)
	before := g.bodies()[0]
	assert.Contains(t, before, "Approved by: nobody yet")
	edits := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.edits
	}
	require.Zero(t, edits())

	crs := previews(t, i.repo.Namespace, 40)
	require.Len(t, crs, 1)
	cr := &crs[0]
	cr.Status.Phase = sluicev1.PhaseAwaitingApproval
	cr.Status.EffectiveRule = &sluicev1.ApprovalRule{Required: 1}
	cr.Status.ApprovedBy = []sluicev1.Identity{"github:carol"}
	require.NoError(t, k8s.Status().Update(ctx, cr))
	require.Eventually(t, func() bool { return strings.Contains(g.bodies()[0], "Approved by: `github:carol`") }, time.Minute, 50*time.Millisecond,
		"the approval shows without a push")
	assert.Contains(t, g.bodies()[0], "no more approvals needed")
	assert.Len(t, g.bodies(), 1, "edited in place")
	assert.Equal(t, 1, edits())

	checks := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.checks
	}
	checksBefore := checks()
	// A status write that changes nothing the comment shows.
	cr.Status.Conditions = append(cr.Status.Conditions, metav1.Condition{Type: "Validated", Status: metav1.ConditionTrue, Reason: "Checked", LastTransitionTime: metav1.Now()})
	require.NoError(t, k8s.Status().Update(ctx, cr))
	// ... and the same approval state rendered again directly.
	require.NoError(t, i.h.RefreshApprovals(ctx, cr))
	i.h.WaitComments()
	assert.Equal(t, 1, edits())
	assert.Equal(t, checksBefore, checks(), "nothing posted when the comment reads the same, Check Runs included")

	cr.Status.ApprovedBy = nil
	require.NoError(t, k8s.Status().Update(ctx, cr))
	require.Eventually(t, func() bool { return strings.Contains(g.bodies()[0], "Approved by: nobody yet") }, time.Minute, 50*time.Millisecond,
		"the revocation shows")
	assert.Contains(t, g.bodies()[0], "still needed: 1 more")
	assert.Equal(t, 2, edits(), "no edit when the comment reads the same")
}
