package install_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// createdTotal is the world's syncer's created-ChangeRequests counter,
// all verdicts.
func (w *world) createdTotal() float64 {
	m := w.syncer.Reconciler.Metrics
	sum := 0.0
	for _, v := range []string{"pass", "warn", "fail"} {
		sum += testutil.ToFloat64(m.ChangeRequestsCreated.WithLabelValues(v))
	}
	return sum
}

// pushFrom is a push of after whose webhook sender is login.
func (w *world) pushFrom(after, login string) []byte {
	return providertest.Edit(w.t, w.pushBody(after), func(m map[string]any) {
		m["sender"].(map[string]any)["login"] = login
	})
}

// TestChangeRequests_everyKindIsMadeAlike: a change of the branch, a
// pull-request preview and a Delete are made by one path, so each carries
// the trace of the webhook that caused it, counts in the created metric,
// records its source, and locates its findings in a file.
func TestChangeRequests_everyKindIsMadeAlike(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	// Prod is outside the Repository's namespaces, so every change of
	// cart-prod has the targetNamespaces finding, with its file; and
	// removed releases get a Delete.
	repo := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(w.repo), repo))
	orig := repo.DeepCopy()
	repo.Spec.TargetNamespaces, repo.Spec.Prune = []string{"cart-staging"}, true
	require.NoError(t, k8s.Patch(ctx, repo, client.MergeFrom(orig)))
	// The patch makes a pass of its own; let it end before the commits
	// below, or it may make the branch change before the traced webhook.
	require.Eventually(t, func() bool {
		got := &sluicev1.Repository{}
		return k8s.Get(ctx, client.ObjectKeyFromObject(repo), got) == nil && got.Status.ObservedGeneration == repo.Generation
	}, 2*time.Minute, 10*time.Millisecond, "the Repository's own pass after the patch")

	traced := func(id string) map[string]string {
		return map[string]string{"traceparent": "00-" + id + "-00f067aa0ba902b7-01"}
	}
	const branchTrace, previewTrace, deleteTrace = "4bf92f3577b34da6a3ce929d0e0e4701", "4bf92f3577b34da6a3ce929d0e0e4702", "4bf92f3577b34da6a3ce929d0e0e4703"

	before := w.createdTotal()
	c1 := w.merge(map[string]string{prodValues: "replicaCount: 3\n"})
	require.Equal(t, http.StatusAccepted, w.sendWith("push", w.pushBody(c1), traced(branchTrace)))
	branch := w.changeRequest(sluicev1.ChangeRequestName("cart-prod", c1, 1))

	h := w.pullRequest(7, c1, map[string]string{prodValues: "replicaCount: 4\n"})
	require.Equal(t, http.StatusAccepted, w.sendWith("pull_request", w.prBody("opened", 7, h, c1), traced(previewTrace)))
	preview := w.changeRequest(sluicev1.PreviewChangeRequestName("cart-prod", 7, h))

	w.git.Remove("services/cart")
	w.git.WriteFile("services/README.md", "the services folder stays\n")
	gone := w.git.Commit("retire cart", "alice@example.com")
	require.Equal(t, http.StatusAccepted, w.sendWith("push", w.pushBody(gone), traced(deleteTrace)))
	del := w.changeRequest(sluicev1.DeleteChangeRequestName("cart-prod", gone, 1))
	require.True(t, del.IsDelete())

	for _, tc := range []struct {
		kind  string
		cr    *sluicev1.ChangeRequest
		trace string
	}{{"branch", branch, branchTrace}, {"preview", preview, previewTrace}, {"delete", del, deleteTrace}} {
		assert.True(t, strings.HasPrefix(tc.cr.Annotations[tracing.Annotation], "00-"+tc.trace+"-"), "%s: trace annotation %q", tc.kind, tc.cr.Annotations[tracing.Annotation])
		require.NotNil(t, tc.cr.Spec.Source, "%s: spec.source", tc.kind)
		assert.Equal(t, sluicev1.RelativePath("services/cart"), tc.cr.Spec.Source.Path, tc.kind)
		assert.Equal(t, sluicev1.ChartSource{Path: "charts/service"}, tc.cr.Spec.Source.Chart, tc.kind)
		var file string
		for _, f := range tc.cr.Spec.Verdict.Findings {
			if f.Policy == "targetNamespaces" {
				file = f.File
			}
		}
		assert.Equal(t, "services/cart/service.yaml", file, "%s: the targetNamespaces finding names its file", tc.kind)
	}
	// Four or more were created: cart-prod's three, plus cart-staging's
	// Delete (and nothing else changed staging before).
	require.Eventually(t, func() bool { return w.createdTotal()-before >= 4 }, 2*time.Minute, 10*time.Millisecond, "every kind counts in sluice_changerequests_created_total")
	_ = w.changeRequest(sluicev1.DeleteChangeRequestName("cart-staging", gone, 1))
	assert.Equal(t, 4.0, w.createdTotal()-before, "the branch change, the preview and two Deletes, each counted once")
}

// TestPushWebhook_theAuthenticatedPusherIsAnAuthorWhateverTheCommitEmail:
// an approver pushes directly with a commit e-mail of their choosing; the
// webhook's sender (verified by the signature) is recorded in the
// Repository's status and lands in the change's spec.pushers, which the
// gate excludes like an author. Pushers accumulate until something is
// applied.
func TestPushWebhook_theAuthenticatedPusherIsAnAuthorWhateverTheCommitEmail(t *testing.T) {
	w := newWorld(t)
	ctx := context.Background()
	w.git.WriteFile(prodValues, "replicaCount: 9\n")
	c1 := w.git.Commit("bump", "build-bot@example.com")
	require.Equal(t, http.StatusAccepted, w.send("push", w.pushFrom(c1, "alice")))
	cr := w.changeRequest(sluicev1.ChangeRequestName("cart-prod", c1, 1))
	assert.Contains(t, cr.Spec.Authors, sluicev1.Identity("email:build-bot@example.com"), "the commit e-mail stays, informative")
	assert.Contains(t, cr.Spec.Pushers, sluicev1.Identity("github:alice"), "the approver who pushed is an author for the gate")

	repo := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(w.repo), repo))
	require.NotEmpty(t, repo.Status.Pushes, "the push is recorded, so a restart loses no pusher")
	last := repo.Status.Pushes[len(repo.Status.Pushes)-1]
	assert.Equal(t, c1, last.Commit)
	assert.Equal(t, sluicev1.Identity("github:alice"), last.Pusher)

	// Nothing was applied: the next change keeps alice and adds bob.
	w.git.WriteFile(prodValues, "replicaCount: 10\n")
	c2 := w.git.Commit("bump again", "build-bot@example.com")
	require.Equal(t, http.StatusAccepted, w.send("push", w.pushFrom(c2, "bob")))
	cr2 := w.changeRequest(sluicev1.ChangeRequestName("cart-prod", c2, 1))
	assert.ElementsMatch(t, []sluicev1.Identity{"github:alice", "github:bob"}, cr2.Spec.Pushers)
}
