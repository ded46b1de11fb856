package argocd

// Verification after Argo CD delivery, and the rollback through the Sluice
// plugin, against a real Argo CD and a real Prometheus.

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/verify/promtest"
)

// liveApp is the service the chart stands for: its error ratio is what
// Argo CD last synced into the target namespace (5% while the chart's
// ConfigMap says "bad", none otherwise), read on every scrape.
type liveApp struct{ f *fixture }

func (a liveApp) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ratio := 0.0
	if a.f.message() == "bad" {
		ratio = 0.05
	}
	fmt.Fprintf(w, "# TYPE app_error_ratio gauge\napp_error_ratio %g\n", ratio)
}

// verification is the check of every change of the test: the error
// ratio of the release's namespace under 0.5%, measured three times two
// seconds apart, one failure forgiven (the first measurement of a sync
// may still see the previous version's last scrape).
func verification(promURL string) *sluicev1.VerificationSpec {
	return &sluicev1.VerificationSpec{PrometheusURL: promURL, Checks: []sluicev1.MetricCheck{{
		Name: "error-ratio", Query: `max(app_error_ratio{namespace="{{ .Namespace }}"})`, SuccessCondition: "result < 0.005",
		Interval: &metav1.Duration{Duration: 2 * time.Second}, Count: 3, FailureLimit: 1,
	}}}
}

// TestOperator_verifiesAfterArgoCDAndRollsBackThroughThePlugin: with
// Argo CD delivery a change is verified once Argo CD reports it Synced
// and Healthy; a version whose error ratio fails the check ends
// VerificationFailed, the operator asks for a rollback to the verified
// change, and the rollback change (recorded as the syncer records it:
// the verified revision's tree, spec.rollback) is synced by Argo CD
// through the plugin, so the live ConfigMap is the verified one again,
// and verified; the failed content stays quarantined.
func TestOperator_verifiesAfterArgoCDAndRollsBackThroughThePlugin(t *testing.T) {
	f := newFixture(t, true)
	app := httptest.NewServer(liveApp{f})
	t.Cleanup(app.Close)
	prom, err := promtest.Start(map[string]string{f.target: app.Listener.Addr().String()})
	require.NoError(t, err)
	t.Cleanup(prom.Stop)
	ctx := f.startOperator(5*time.Second, nil)
	f.autoApprove(ctx)
	withChecks := func(cr *sluicev1.ChangeRequest) { cr.Spec.Verification = verification(prom.URL) }

	goodCommit, goodFiles := f.push("message: good\n", nil)
	good := f.changeFor(goodCommit, goodFiles, f.digestOf(goodFiles), withChecks)
	got, err := env.WaitChangePhase(ctx, client.ObjectKeyFromObject(good), sluicev1.PhaseVerified, 180*time.Second)
	require.NoError(t, err, argo.Logs())
	require.Contains(t, got.Status.Apply.Message, "is Healthy", "verified only after Argo CD reported the sync healthy")
	require.Len(t, got.Status.Verification.Measurements, 3)
	require.Equal(t, "good", f.message())

	badCommit, badFiles := f.push("message: bad\n", nil)
	bad := f.changeFor(badCommit, badFiles, f.digestOf(badFiles), withChecks)
	got, err = env.WaitChangePhase(ctx, client.ObjectKeyFromObject(bad), sluicev1.PhaseVerificationFailed, 180*time.Second)
	require.NoError(t, err, argo.Logs())
	require.Equal(t, "bad", f.message(), "Argo CD synced the bad version before it was measured")
	last := got.Status.Verification.Measurements[len(got.Status.Verification.Measurements)-1]
	require.Equal(t, "0.05", last.Value, "the evidence is what Prometheus measured: %+v", last)

	// The operator asks the syncer for the rollback to the verified change.
	var to string
	require.Eventually(t, func() bool {
		rel := &sluicev1.Release{}
		require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel))
		to = sluicev1.RollbackRequests(rel.Annotations)[bad.Name]
		return to != ""
	}, 60*time.Second, 100*time.Millisecond, "no rollback asked for %s", bad.Name)
	require.Equal(t, good.Name, to)

	// The syncer's answer: the verified revision's tree, as a rollback.
	rb := f.changeFor(goodCommit, goodFiles, good.Spec.ManifestDigest, withChecks, func(cr *sluicev1.ChangeRequest) {
		cr.Name = sluicev1.RollbackChangeRequestName(f.release.Name, bad.Name, 1)
		cr.Spec.Rollback = &sluicev1.RollbackSpec{Of: bad.Name, To: good.Name}
		cr.Spec.PreviousRevision = badCommit
	})
	got, err = env.WaitChangePhase(ctx, client.ObjectKeyFromObject(rb), sluicev1.PhaseVerified, 180*time.Second)
	require.NoError(t, err, argo.Logs())
	require.Equal(t, "good", f.message(), "Argo CD synced the verified version back through the plugin")
	require.Equal(t, goodCommit, f.application().Object["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"])

	rel := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), rel))
	require.Equal(t, rb.Name, rel.Status.AppliedChange)
	require.NotNil(t, rel.Status.LastVerified)
	require.Equal(t, rb.Name, rel.Status.LastVerified.ChangeRequest)
	require.NotNil(t, rel.Status.Quarantine)
	require.Equal(t, bad.Name, rel.Status.Quarantine[0].ChangeRequest)
}
