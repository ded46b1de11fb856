package install_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const prodValues = "services/cart/values-prod.yaml"

// TestHeadline_approvedPullRequestPreviewCarriesOverToTheMergeCommitByteForByte
// is the promise end to end, through signed webhooks to a running syncer
// with a real git repository: reviews of a pull request's preview apply to
// the merge commit exactly when the merged content is what was reviewed.
func TestHeadline_approvedPullRequestPreviewCarriesOverToTheMergeCommitByteForByte(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()

	// A pull request is opened: its preview is built against main.
	h1 := w.pullRequest(1, w.base, map[string]string{prodValues: "replicaCount: 3\n"})
	require.Equal(t, http.StatusAccepted, w.send("pull_request", w.prBody("opened", 1, h1, w.base)))
	preview := w.changeRequest(sluicev1.PreviewChangeRequestName("cart-prod", 1, h1))
	require.True(t, preview.Spec.PullRequest.Preview)

	// Two reviewers approve it.
	require.Equal(t, http.StatusAccepted, w.send("pull_request_review", w.reviewBody(1, 11, "approved", h1, h1, "alice")))
	require.Equal(t, http.StatusAccepted, w.send("pull_request_review", w.reviewBody(1, 12, "approved", h1, h1, "bob")))
	assert.Equal(t, map[string]sluicev1.Decision{"github:alice approve": sluicev1.DecisionApprove, "github:bob approve": sluicev1.DecisionApprove},
		w.approvalsFor(preview.Spec.ApprovalDigest, 2))

	// It is merged: the push of the merge commit makes its ChangeRequest,
	// whose approvalDigest is the preview's, so both Approvals apply.
	m1 := w.merge(map[string]string{prodValues: "replicaCount: 3\n"})
	require.Equal(t, http.StatusAccepted, w.send("push", w.pushBody(m1)))
	merged := w.changeRequest(sluicev1.ChangeRequestName("cart-prod", m1, 1))
	assert.Nil(t, merged.Spec.PullRequest)
	assert.Equal(t, preview.Spec.ApprovalDigest, merged.Spec.ApprovalDigest, "the merge commit carries exactly the reviewed content")
	assert.Equal(t, preview.Spec.Verdict.Risk, merged.Spec.Verdict.Risk, "the preview was rated against the same previous revision")
	assert.Equal(t, preview.Spec.Verdict.Result, merged.Spec.Verdict.Result)
	assert.Len(t, w.approvals(merged.Spec.ApprovalDigest), 2)
	// Only prod's values changed: staging reads nothing that changed, so it
	// has neither a preview nor a change at the merge.
	for _, name := range []string{sluicev1.PreviewChangeRequestName("cart-staging", 1, h1), sluicev1.ChangeRequestName("cart-staging", m1, 1)} {
		assert.True(t, apierrors.IsNotFound(k8s.Get(ctx, client.ObjectKey{Namespace: w.ns, Name: name}, &sluicev1.ChangeRequest{})), name)
	}

	// Closing the pull request deletes its previews, never the Approvals.
	require.Equal(t, http.StatusAccepted, w.send("pull_request", w.prBody("closed", 1, h1, w.base)))
	require.Eventually(t, func() bool {
		var list sluicev1.ChangeRequestList
		require.NoError(t, k8s.List(ctx, &list, client.InNamespace(w.ns), client.MatchingLabels{sluicev1.LabelPullRequest: "1"}))
		return len(list.Items) == 0
	}, 2*time.Minute, 10*time.Millisecond)
	assert.Len(t, w.approvals(merged.Spec.ApprovalDigest), 2)

	// A second pull request, updated after its first commit.
	h2a := w.pullRequest(2, m1, map[string]string{prodValues: "replicaCount: 4\n"})
	require.Equal(t, http.StatusAccepted, w.send("pull_request", w.prBody("opened", 2, h2a, m1)))
	p2a := w.changeRequest(sluicev1.PreviewChangeRequestName("cart-prod", 2, h2a))
	h2b := w.pullRequest(2, h2a, map[string]string{prodValues: "replicaCount: 5\n"})
	require.Equal(t, http.StatusAccepted, w.send("pull_request", w.prBody("synchronize", 2, h2b, m1)))
	p2b := w.changeRequest(sluicev1.PreviewChangeRequestName("cart-prod", 2, h2b))
	require.NotEqual(t, p2a.Spec.ApprovalDigest, p2b.Spec.ApprovalDigest)

	// A review given on the older commit approves that commit only.
	require.Equal(t, http.StatusAccepted, w.send("pull_request_review", w.reviewBody(2, 21, "approved", h2a, h2b, "alice")))
	assert.Equal(t, map[string]sluicev1.Decision{"github:alice approve": sluicev1.DecisionApprove}, w.approvalsFor(p2a.Spec.ApprovalDigest, 1))
	// bob approves the new head, then his review is dismissed: a revoke.
	// (Deliveries are handled asynchronously and GitHub is asked for bob's
	// current state: the dismissal goes out once the approval is recorded.)
	require.Equal(t, http.StatusAccepted, w.send("pull_request_review", w.reviewBody(2, 22, "approved", h2b, h2b, "bob")))
	w.approvalsFor(p2b.Spec.ApprovalDigest, 1)
	require.Equal(t, http.StatusAccepted, w.send("pull_request_review", w.reviewBody(2, 22, "dismissed", h2b, h2b, "bob")))
	assert.Equal(t, map[string]sluicev1.Decision{"github:bob approve": sluicev1.DecisionApprove, "github:bob revoke": sluicev1.DecisionRevoke},
		w.approvalsFor(p2b.Spec.ApprovalDigest, 2), "alice's review of the older commit is not among them")

	// The merge differs from the reviewed head by one byte in the service:
	// a different digest, so no Approval applies to it.
	m2 := w.merge(map[string]string{prodValues: "replicaCount: 6\n"})
	require.Equal(t, http.StatusAccepted, w.send("push", w.pushBody(m2)))
	merged2 := w.changeRequest(sluicev1.ChangeRequestName("cart-prod", m2, 1))
	assert.NotEqual(t, p2b.Spec.ApprovalDigest, merged2.Spec.ApprovalDigest)
	assert.NotEqual(t, p2a.Spec.ApprovalDigest, merged2.Spec.ApprovalDigest)
	assert.Empty(t, w.approvals(merged2.Spec.ApprovalDigest))
}

// TestPushWebhook_syncsAtOnceAndIgnoresOtherBranchesAndReplays checks that
// the push webhook, not the hour-long poll, makes the ChangeRequests.
func TestPushWebhook_syncsAtOnceAndIgnoresOtherBranchesAndReplays(t *testing.T) {
	w := newWorld(t)
	observed := func() uint64 {
		var m dto.Metric
		require.NoError(t, w.in.Metrics.PushToChangeRequest.(prometheus.Metric).Write(&m))
		return m.GetHistogram().GetSampleCount()
	}
	before := observed()
	c1 := w.merge(map[string]string{prodValues: "replicaCount: 7\n"})
	body := providertest.Edit(t, w.pushBody(c1), func(m map[string]any) { m["ref"] = "refs/heads/feature" })
	assert.Equal(t, http.StatusOK, w.send("push", body), "a branch the Repository does not track")
	require.Equal(t, http.StatusAccepted, w.send("push", w.pushBody(c1)))
	w.changeRequest(sluicev1.ChangeRequestName("cart-prod", c1, 1))
	// The push-to-ChangeRequest latency was measured once for this push.
	require.Eventually(t, func() bool { return observed() == before+1 }, 2*time.Minute, 10*time.Millisecond)
}

// TestPushWebhook_carriesTheSendersTraceIntoTheChangeRequest: a delivery
// with a W3C traceparent header starts the webhook span under it, the sync
// continues it, and the ChangeRequest carries it on for the operator.
func TestPushWebhook_carriesTheSendersTraceIntoTheChangeRequest(t *testing.T) {
	w := newWorld(t)
	const traceID, senderSpan = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
	c1 := w.merge(map[string]string{prodValues: "replicaCount: 5\n"})
	require.Equal(t, http.StatusAccepted, w.sendWith("push", w.pushBody(c1), map[string]string{"traceparent": "00-" + traceID + "-" + senderSpan + "-01"}))
	cr := w.changeRequest(sluicev1.ChangeRequestName("cart-prod", c1, 1))
	tp := cr.Annotations[tracing.Annotation]
	require.Regexp(t, "^00-"+traceID+"-[0-9a-f]{16}-01$", tp, "the ChangeRequest continues the sender's trace")

	// The sync span ends with the sync pass, a moment after the
	// ChangeRequest is created.
	var webhook, sync tracetest.SpanStub
	require.Eventually(t, func() bool {
		for _, s := range spans.GetSpans() {
			if s.SpanContext.TraceID().String() != traceID {
				continue
			}
			switch s.Name {
			case "sluice.webhook":
				webhook = s
			case "sluice.sync":
				sync = s
			}
		}
		return webhook.Name != "" && sync.Name != ""
	}, time.Minute, 20*time.Millisecond, "the webhook and sync spans ended")
	require.Equal(t, senderSpan, webhook.Parent.SpanID().String(), "the webhook span's parent is the sender's span")
	require.Equal(t, webhook.SpanContext.SpanID(), sync.Parent.SpanID(), "the sync continues the webhook span")
	require.Contains(t, tp, sync.SpanContext.SpanID().String(), "the annotation names the sync span")
}

// TestHeadline_terraformPlanDigestCarriesOverToo repeats the promise for a
// service with a Terraform stack (the sample checkout with its shared local
// module): the approvalDigest then also binds the plan, and a reviewed
// preview's plan is the merge commit's.
func TestHeadline_terraformPlanDigestCarriesOverToo(t *testing.T) {
	w := newWorld(t, "checkout", "_modules")
	tf := "services/checkout/terraform/main.tf"
	stack, err := os.ReadFile(filepath.Join(root, tf))
	require.NoError(t, err)
	longer := strings.Replace(string(stack), `"14d"`, `"30d"`, 1)
	require.NotEqual(t, string(stack), longer)

	h := w.pullRequest(5, w.base, map[string]string{tf: longer})
	require.Equal(t, http.StatusAccepted, w.send("pull_request", w.prBody("opened", 5, h, w.base)))
	preview := w.changeRequest(sluicev1.PreviewChangeRequestName("checkout-prod", 5, h))
	require.NotEmpty(t, preview.Spec.PlanDigest, "the preview was planned")
	require.Equal(t, http.StatusAccepted, w.send("pull_request_review", w.reviewBody(5, 51, "approved", h, h, "alice")))
	w.approvalsFor(preview.Spec.ApprovalDigest, 1)

	m := w.merge(map[string]string{tf: longer})
	require.Equal(t, http.StatusAccepted, w.send("push", w.pushBody(m)))
	merged := w.changeRequest(sluicev1.ChangeRequestName("checkout-prod", m, 1))
	assert.Equal(t, preview.Spec.PlanDigest, merged.Spec.PlanDigest)
	assert.Equal(t, preview.Spec.ApprovalDigest, merged.Spec.ApprovalDigest)
	assert.Len(t, w.approvals(merged.Spec.ApprovalDigest), 1)
}
