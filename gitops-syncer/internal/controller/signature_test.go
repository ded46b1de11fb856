package controller_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// basicAuth adds the registry's credentials to every request (the
// publisher signing a chart in the test's registry).
type basicAuth struct{ next http.RoundTripper }

func (b basicAuth) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.SetBasicAuth(registryUser, registryPass)
	return b.next.RoundTrip(r)
}

// TestSync_aChartWithoutAVerifiedSignatureProposesNothingAndLeavesTheOthers:
// a Repository that asks charts from its registry for a cosign signature
// gets no ChangeRequest for a chart with none, or one by another key,
// says why, and proposes the other service; once the publisher signs the
// chart with the Repository's key, the next pass proposes it.
func TestSync_aChartWithoutAVerifiedSignatureProposesNothingAndLeavesTheOthers(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChart(t, "1.1.0")
	publisher, other := chartrepotest.NewCosignKey(t), chartrepotest.NewCosignKey(t)
	require.NoError(t, k8s.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "chart-keys", Namespace: ns},
		Data:       map[string][]byte{"publisher.pub": publisher.PublicPEM},
	}))
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	fixture.CopyDir(chartDir, "charts/service")
	helmService(fixture, "alpha", "staging")
	remoteService(fixture, reg.repoURL(), "~1.1")
	head := fixture.Commit("web and alpha", "alice@example.com")
	startSyncer(t, ns, "", chartsFrom(reg))
	creds := withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass)
	repo := newRepository(t, ns, "infra", fixture.FileURL(), creds, func(r *sluicev1.Repository) {
		r.Spec.ChartRepositories[0].Verify = &sluicev1.ChartVerification{
			Provider: sluicev1.ChartSignatureCosign, SecretRef: sluicev1.LocalObjectReference{Name: "chart-keys"}}
	})
	web := sluicev1.ChangeRequestName("web-staging", head, 1)

	waitHandled(t, repo, requestReconcile(t, repo))
	cond := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonChartUnavailable)
	assert.Contains(t, cond.Message, "signature is not verified: no cosign signature")
	assert.NotContains(t, cond.Message, registryPass)
	crs := changeRequests(t, ns)
	assert.Contains(t, crs, sluicev1.ChangeRequestName("alpha-staging", head, 1), "the other service is unaffected")
	assert.NotContains(t, crs, web)

	signer := &http.Client{Transport: basicAuth{next: reg.srv.Client().Transport}}
	resolved, err := chartrepo.Resolve(ctx, chartrepo.Ref{Repo: reg.repoURL(), Name: "web", Version: "1.1.0"},
		chartrepo.Options{HTTPClient: reg.srv.Client(), Credentials: &chartrepo.Credentials{Username: registryUser, Password: registryPass}})
	require.NoError(t, err)

	// Signed, but not by a key the Repository trusts.
	other.Sign(t, signer, reg.host()+"/charts/web", resolved.Digest, resolved.Digest)
	waitHandled(t, repo, requestReconcile(t, repo))
	cond = waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonChartUnavailable)
	assert.Contains(t, cond.Message, "not made by any of the public keys")
	assert.NotContains(t, changeRequests(t, ns), web)

	// The publisher signs it: the chart is proposed, pinned to the digest
	// that was verified.
	publisher.Sign(t, signer, reg.host()+"/charts/web", resolved.Digest, resolved.Digest)
	before := reg.requests.Load()
	waitHandled(t, repo, requestReconcile(t, repo))
	waitReady(t, repo, metav1.ConditionTrue, sluicev1.ReasonSucceeded)
	verifying := reg.requests.Load() - before
	cr, ok := changeRequests(t, ns)[web]
	require.True(t, ok, "the signed chart is proposed")
	assert.Equal(t, sluicev1.Digest(resolved.Digest), cr.Spec.Source.Chart.Digest)

	// A re-sync of the unchanged range asks for no signature again.
	before = reg.requests.Load()
	waitHandled(t, repo, requestReconcile(t, repo))
	resync := reg.requests.Load() - before
	t.Logf("FIGURE cosign-verified chart: pass that verified it %d registry requests, re-sync of the unchanged range %d", verifying, resync)
	assert.LessOrEqual(t, resync, int64(2), "tag list and tag digest only, as without verification")
}
