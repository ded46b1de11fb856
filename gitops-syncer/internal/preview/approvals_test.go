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
	require.NoError(t, (&preview.CommentRefresher{Client: mgr.GetClient(), Handler: i.h, SkipNameValidation: true}).SetupWithManager(mgr))
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

// TestApprovals_aMergedPullRequestsCommentShowsTheVerificationOfItsMerge:
// once the pull request is merged, the change of the tracked branch that
// merged it (spec.mergedPullRequests) is applied and verified: the
// comment, kept although the pull request is closed, shows that change
// with its verification and measurements, and follows it to its end; a
// status write that changes nothing shown edits nothing. A closed pull
// request's comment is not touched otherwise (the approvals refresh).
func TestApprovals_aMergedPullRequestsCommentShowsTheVerificationOfItsMerge(t *testing.T) {
	i := newInfra(t, "")
	g := withComments(t, i)
	startRefresher(t, i)
	ctx := context.Background()

	head := i.pullRequest(t, 41, i.base, prodReplicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 41, head, i.base)))
	i.h.WaitComments()
	require.Len(t, g.bodies(), 1)
	edits := func() int {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.edits
	}
	g.mu.Lock()
	g.state = "closed"
	g.mu.Unlock()

	// The branch sync's change of the merge, as it records it.
	prev := previews(t, i.repo.Namespace, 41)
	require.Len(t, prev, 1)
	branch := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: prev[0].Spec.Release + "-merged0001", Namespace: i.repo.Namespace, Labels: map[string]string{
			sluicev1.LabelRepository: i.repo.Name, sluicev1.LabelRelease: prev[0].Spec.Release}},
		Spec: *prev[0].Spec.DeepCopy(),
	}
	branch.Spec.PullRequest = nil
	branch.Spec.MergedPullRequests = []int64{41}
	require.NoError(t, k8s.Create(ctx, branch))

	now := metav1.Now()
	branch.Status.Phase = sluicev1.PhaseVerifying
	branch.Status.Verification = &sluicev1.VerificationStatus{StartedAt: now, Message: "1 of 3 measurements", Measurements: []sluicev1.Measurement{{
		Check: "error-rate", Phase: sluicev1.MeasurementSuccessful, Value: "0.001", Query: "sum(rate(errors[1m]))", Time: metav1.NowMicro()}}}
	require.NoError(t, k8s.Status().Update(ctx, branch))
	require.Eventually(t, func() bool {
		b := g.bodies()[0]
		return strings.Contains(b, "**Verification**: Verifying") && strings.Contains(b, "`0.001`") && strings.Contains(b, branch.Name)
	}, time.Minute, 50*time.Millisecond, "the merged pull request's comment shows its branch change's verification:\n%s", g.bodies()[0])
	assert.Len(t, g.bodies(), 1, "edited in place")
	n := edits()

	// A condition write changes nothing the comment shows.
	branch.Status.Conditions = append(branch.Status.Conditions, metav1.Condition{Type: "Validated", Status: metav1.ConditionTrue, Reason: "Checked", LastTransitionTime: metav1.Now()})
	require.NoError(t, k8s.Status().Update(ctx, branch))
	require.NoError(t, i.h.RefreshMerged(ctx, branch))
	i.h.WaitComments()
	assert.Equal(t, n, edits())

	branch.Status.Phase = sluicev1.PhaseVerificationFailed
	branch.Status.Verification.Message = "error-rate failed"
	branch.Status.Verification.Measurements = append(branch.Status.Verification.Measurements, sluicev1.Measurement{
		Check: "error-rate", Phase: sluicev1.MeasurementFailed, Value: "0.05", Query: "sum(rate(errors[1m]))", Time: metav1.NowMicro()})
	require.NoError(t, k8s.Status().Update(ctx, branch))
	require.Eventually(t, func() bool {
		b := g.bodies()[0]
		return strings.Contains(b, "**Verification**: VerificationFailed") && strings.Contains(b, "`0.05`")
	}, time.Minute, 50*time.Millisecond, "the comment follows the verification to its end")

	// The previews' approvals refresh leaves the closed pull request alone.
	n = edits()
	cr := &prev[0]
	cr.Status.Phase = sluicev1.PhaseAwaitingApproval
	cr.Status.ApprovedBy = []sluicev1.Identity{"github:carol"}
	require.NoError(t, k8s.Status().Update(ctx, cr))
	require.NoError(t, i.h.RefreshApprovals(ctx, cr))
	i.h.WaitComments()
	assert.Equal(t, n, edits())
}
