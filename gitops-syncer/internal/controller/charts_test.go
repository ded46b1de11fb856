package controller_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// chartRegistry is an in-memory OCI registry behind basic auth that
// counts the requests it answers.
type chartRegistry struct {
	srv      *httptest.Server
	requests atomic.Int64
	push     *registry.Client
}

const registryUser, registryPass = "ci", "registry-password-of-the-test"

func newChartRegistry(t *testing.T) *chartRegistry {
	c := &chartRegistry{}
	reg := ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	c.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		if u, p, ok := r.BasicAuth(); !ok || u != registryUser || p != registryPass {
			w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(c.srv.Close)
	var err error
	c.push, err = registry.NewClient(registry.ClientOptHTTPClient(c.srv.Client()), registry.ClientOptBasicAuth(registryUser, registryPass),
		registry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json")))
	require.NoError(t, err)
	return c
}

func (c *chartRegistry) host() string    { return strings.TrimPrefix(c.srv.URL, "https://") }
func (c *chartRegistry) repoURL() string { return "oci://" + c.host() + "/charts" }

// pushChart pushes chart "web" at version with Helm's registry client.
func (c *chartRegistry) pushChart(t *testing.T, version string) {
	t.Helper()
	c.pushChartSaying(t, version, "hello")
}

// pushChartSaying pushes chart "web" at version whose ConfigMap says word.
func (c *chartRegistry) pushChartSaying(t *testing.T, version, word string) {
	t.Helper()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: version, Type: "application"},
		Values:   map[string]any{"greeting": "default"},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  version: " + version + "\n  word: " + word + "\n  greeting: {{ .Values.greeting | quote }}\n")}},
	}
	p, err := chartutil.Save(ch, t.TempDir())
	require.NoError(t, err)
	tgz, err := os.ReadFile(p)
	require.NoError(t, err)
	_, err = c.push.Push(tgz, c.host()+"/charts/web:"+version)
	require.NoError(t, err)
}

// remoteService writes service "web" whose chart comes from repoURL.
func remoteService(r *gittest.Repo, repoURL, version string) {
	r.WriteFile("services/web/service.yaml", fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {repo: %q, name: web, version: %q}
values: [values.yaml]
environments:
  - name: staging
    namespace: web-staging
    approval: {required: 1, autoApproveRisk: low}
`, repoURL, version))
	r.WriteFile("services/web/values.yaml", "greeting: from-git\n")
}

// withChartCredentials names the Secret holding the registry's credentials.
func withChartCredentials(t *testing.T, ns, url, user, pass string) func(*sluicev1.Repository) {
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "charts", Namespace: ns},
		Data:       map[string][]byte{"username": []byte(user), "password": []byte(pass)},
	}))
	return func(r *sluicev1.Repository) {
		r.Spec.ChartRepositories = []sluicev1.ChartRepository{{URL: url, SecretRef: &sluicev1.LocalObjectReference{Name: "charts"}}}
	}
}

func chartsFrom(reg *chartRegistry) func(*syncer.Syncer) {
	return func(s *syncer.Syncer) {
		s.Reconciler.ChartOptions = chartrepo.Options{HTTPClient: reg.srv.Client(), Timeout: time.Minute}
	}
}

// artifactFiles lists the files of a ChangeRequest's artifact.
func artifactFiles(t *testing.T, cr sluicev1.ChangeRequest) map[string][]byte {
	t.Helper()
	body, _ := download(t, cr.Spec.Artifact.URL)
	zr, err := gzip.NewReader(bytes.NewReader(body))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		b, _ := io.ReadAll(tr)
		out[h.Name] = b
	}
}

// TestSync_aChartFromAnOCIRegistryIsResolvedPinnedAndReResolvedWithoutAPush:
// a range resolves to one version and digest that the ChangeRequest and
// its artifact carry; a newer version outside the range is no change, one
// inside is a change at the same commit.
func TestSync_aChartFromAnOCIRegistryIsResolvedPinnedAndReResolvedWithoutAPush(t *testing.T) {
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChart(t, "1.1.0")
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	remoteService(fixture, reg.repoURL(), "~1.1")
	head := fixture.Commit("web from the registry", "alice@example.com")
	startSyncer(t, ns, "", chartsFrom(reg))
	pushed := reg.requests.Load()
	start := time.Now()
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass))

	waitHandled(t, repo, requestReconcile(t, repo))
	t.Logf("FIGURE: first sync of a chart from the OCI registry (range ~1.1, basic auth): %d registry requests, %s to the ChangeRequest (validation included)",
		reg.requests.Load()-pushed, time.Since(start).Round(time.Millisecond))
	first, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 1)]
	require.True(t, ok, "a ChangeRequest for the chart")
	c := first.Spec.Source.Chart
	assert.Equal(t, reg.repoURL(), c.Repo)
	assert.Equal(t, "1.1.0", c.Version)
	require.NotEmpty(t, c.Digest)
	assert.NotEmpty(t, first.Spec.ManifestDigest)
	assert.NotEqual(t, sluicev1.VerdictFail, first.Spec.Verdict.Result, "%+v", first.Spec.Verdict.Findings)
	files := artifactFiles(t, first)
	require.NoError(t, chartrepo.Verify(string(c.Digest), files[sources.RemoteChartDir+"/"+sources.RemoteChartFile], files[sources.RemoteChartDir+"/"+sources.RemoteOCIManifestFile]),
		"the artifact carries the approved bytes")
	assert.Equal(t, c, getRelease(t, ns, "web-staging").Spec.Chart, "the Release records the latest change's chart")

	// Nothing new: a re-sync asks the registry only for what the range
	// resolves to and fetches nothing.
	before := reg.requests.Load()
	waitHandled(t, repo, requestReconcile(t, repo))
	resync := reg.requests.Load() - before
	t.Logf("FIGURE: re-sync of an unchanged range ~1.1 made %d registry requests", resync)
	assert.LessOrEqual(t, resync, int64(2), "the tag list and the chosen tag's digest; nothing fetched")
	assert.Len(t, changeRequests(t, ns), 1)

	// 1.2.0 is outside ~1.1: no change.
	reg.pushChart(t, "1.2.0")
	waitHandled(t, repo, requestReconcile(t, repo))
	assert.Len(t, changeRequests(t, ns), 1, "1.2.0 is outside ~1.1")

	// 1.1.1 is inside: a change without a push, at the same commit,
	// whose review shows the chart version against the applied 1.1.0.
	markAppliedIn(t, ns, first, "web-staging")
	reg.pushChart(t, "1.1.1")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs := changeRequests(t, ns)
	second, ok := crs[sluicev1.ChangeRequestName("web-staging", head, 2)]
	require.True(t, ok, "a second ChangeRequest at the same commit: %v", keys(crs))
	assert.Equal(t, "1.1.1", second.Spec.Source.Chart.Version)
	assert.NotEqual(t, first.Spec.Source.Chart.Digest, second.Spec.Source.Chart.Digest)
	assert.NotEqual(t, first.Spec.ApprovalDigest, second.Spec.ApprovalDigest, "the approval of 1.1.0 does not count for 1.1.1")
	cm := &corev1.ConfigMap{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: review.ConfigMapName(second.Name)}, cm))
	s, _, err := review.FromConfigMap(cm, &second)
	require.NoError(t, err)
	require.NotNil(t, s.Chart)
	assert.Contains(t, s.Chart.Line(), "web 1.1.0 → 1.1.1 from "+reg.repoURL())
}

// TestSync_aReSyncOfAnUnchangedRangeAsksTheRegistryOnlyForItsTags: with
// the deployed syncer's digest recheck (--chart-digest-recheck), a range
// that still picks the same version takes the digest it resolved to
// without asking again: one registry request, the tag list. A new version
// in the range is still a change on the next pass.
func TestSync_aReSyncOfAnUnchangedRangeAsksTheRegistryOnlyForItsTags(t *testing.T) {
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChart(t, "1.1.0")
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	remoteService(fixture, reg.repoURL(), "~1.1")
	head := fixture.Commit("web from the registry", "alice@example.com")
	startSyncer(t, ns, "", chartsFrom(reg), func(s *syncer.Syncer) { s.Reconciler.ChartDigestRecheck = time.Hour })
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass))
	waitHandled(t, repo, requestReconcile(t, repo))
	first, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 1)]
	require.True(t, ok, "a ChangeRequest for the chart")

	for range 2 {
		before := reg.requests.Load()
		waitHandled(t, repo, requestReconcile(t, repo))
		resync := reg.requests.Load() - before
		t.Logf("FIGURE: re-sync of an unchanged range ~1.1 with the digest recheck: %d registry requests", resync)
		assert.Equal(t, int64(1), resync, "the tag list only")
	}
	assert.Len(t, changeRequests(t, ns), 1)

	markAppliedIn(t, ns, first, "web-staging")
	reg.pushChart(t, "1.1.1")
	waitHandled(t, repo, requestReconcile(t, repo))
	second, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 2)]
	require.True(t, ok, "1.1.1 in the range is a change")
	assert.Equal(t, "1.1.1", second.Spec.Source.Chart.Version)
	assert.NotEqual(t, first.Spec.Source.Chart.Digest, second.Spec.Source.Chart.Digest)
}

// TestSync_aChartThatCannotBeHadProposesNothingAndLeavesTheOthers: wrong
// credentials and a range with no match stall that release with a clear
// reason and no credential in it, while another service syncs.
func TestSync_aChartThatCannotBeHadProposesNothingAndLeavesTheOthers(t *testing.T) {
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChart(t, "1.1.0")
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	fixture.CopyDir(chartDir, "charts/service")
	helmService(fixture, "alpha", "staging")
	remoteService(fixture, reg.repoURL(), "~1.1")
	head := fixture.Commit("web and alpha", "alice@example.com")
	startSyncer(t, ns, "", chartsFrom(reg))
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, "wrong-password-123"))

	waitHandled(t, repo, requestReconcile(t, repo))
	cond := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonChartUnavailable)
	assert.Contains(t, cond.Message, "refused the credentials")
	assert.NotContains(t, cond.Message, "wrong-password-123")
	crs := changeRequests(t, ns)
	assert.Contains(t, crs, sluicev1.ChangeRequestName("alpha-staging", head, 1), "the other service is unaffected")
	assert.NotContains(t, crs, sluicev1.ChangeRequestName("web-staging", head, 1))

	// A range with no match says so.
	remoteService(fixture, reg.repoURL(), "~3.0")
	second := fixture.Commit("web 3", "alice@example.com")
	require.NoError(t, k8s.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "charts", Namespace: ns}}))
	withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass)
	waitHandled(t, repo, requestReconcile(t, repo))
	cond = waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonChartUnavailable)
	assert.Contains(t, cond.Message, "no chart version matches")
	assert.NotContains(t, changeRequests(t, ns), sluicev1.ChangeRequestName("web-staging", second, 1))
}

// TestArtifacts_aLostArtifactWithARemoteChartIsRebuiltFromItsRecordedDigest:
// a syncer that lost its storage and its chart cache rebuilds an artifact
// by fetching the chart by the digest the ChangeRequest recorded, even
// after the tag moved, and serves the same bytes.
func TestArtifacts_aLostArtifactWithARemoteChartIsRebuiltFromItsRecordedDigest(t *testing.T) {
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChart(t, "1.1.0")
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	remoteService(fixture, reg.repoURL(), "1.1.0")
	head := fixture.Commit("web 1.1.0", "alice@example.com")
	first := startSyncer(t, ns, "", chartsFrom(reg))
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass))
	waitHandled(t, repo, requestReconcile(t, repo))
	cr := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 1)]
	require.NotEmpty(t, cr.Name)
	before, sum := download(t, cr.Spec.Artifact.URL)

	reg.pushChartSaying(t, "1.1.0", "moved")
	first.stop()
	second := startSyncer(t, ns, "", chartsFrom(reg))
	after, sum2 := download(t, second.ArtifactURL+strings.TrimPrefix(cr.Spec.Artifact.URL, first.ArtifactURL))
	assert.Equal(t, sum, sum2)
	assert.Equal(t, before, after, "the rebuilt artifact carries the approved chart, not the moved tag's")
}

// TestSync_aNewChartVersionIsNoticedOnThePollWithoutAPushOrARequest: with
// a chart from a chart repository, a poll with the same head is not idle,
// so a new version in the range becomes a ChangeRequest on the interval.
func TestSync_aNewChartVersionIsNoticedOnThePollWithoutAPushOrARequest(t *testing.T) {
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChart(t, "1.1.0")
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	remoteService(fixture, reg.repoURL(), "~1.1")
	head := fixture.Commit("web from the registry", "alice@example.com")
	startSyncer(t, ns, "", chartsFrom(reg))
	newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass),
		func(r *sluicev1.Repository) { r.Spec.Interval = &metav1.Duration{Duration: time.Second} })
	require.Eventually(t, func() bool {
		_, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 1)]
		return ok
	}, 2*time.Minute, 100*time.Millisecond)

	reg.pushChart(t, "1.1.1")
	require.Eventually(t, func() bool {
		cr, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 2)]
		return ok && cr.Spec.Source.Chart.Version == "1.1.1"
	}, 2*time.Minute, 100*time.Millisecond, "the poll resolves the range again")
}

// TestSync_aRestartedSyncerRatesANewChartVersionAgainstTheAppliedChart:
// a syncer that never rendered the applied change fetches the applied
// chart by its digest to render it, so removed objects are seen and the
// risk is not rated high for want of the previous manifest.
func TestSync_aRestartedSyncerRatesANewChartVersionAgainstTheAppliedChart(t *testing.T) {
	ns := newNamespace(t)
	reg := newChartRegistry(t)
	reg.pushChart(t, "1.1.0")
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	remoteService(fixture, reg.repoURL(), "~1.1")
	head := fixture.Commit("web from the registry", "alice@example.com")
	first := startSyncer(t, ns, "", chartsFrom(reg))
	repo := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, reg.repoURL(), registryUser, registryPass))
	waitHandled(t, repo, requestReconcile(t, repo))
	applied := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 1)]
	require.NotEmpty(t, applied.Name)
	markAppliedIn(t, ns, applied, "web-staging")
	first.stop()

	startSyncer(t, ns, "", chartsFrom(reg))
	reg.pushChart(t, "1.1.1")
	waitHandled(t, repo, requestReconcile(t, repo))
	next, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 2)]
	require.True(t, ok)
	for _, f := range next.Spec.Verdict.Findings {
		assert.NotEqual(t, "helm.previous_manifest", f.Policy, "the applied chart was rendered: %s", f.Message)
	}
}

// TestSync_aChartFromAHelmRepositoryIsPinnedToTheSHA256OfItsArchive: a
// Helm repository behind basic auth, its index.yaml generated by Helm's
// repo package: the change records the archive's sha256 and carries it.
func TestSync_aChartFromAHelmRepositoryIsPinnedToTheSHA256OfItsArchive(t *testing.T) {
	dir := t.TempDir()
	var requests atomic.Int64
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if u, p, ok := r.BasicAuth(); !ok || u != registryUser || p != registryPass {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var tgz []byte
	for _, v := range []string{"1.1.0", "1.1.4", "2.0.0"} {
		ch := &chart.Chart{
			Metadata:  &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: v, Type: "application"},
			Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  version: " + v + "\n")}},
		}
		p, err := chartutil.Save(ch, dir)
		require.NoError(t, err)
		if v == "1.1.4" {
			tgz, err = os.ReadFile(p)
			require.NoError(t, err)
		}
	}
	idx, err := repo.IndexDirectory(dir, srv.URL)
	require.NoError(t, err)
	require.NoError(t, idx.WriteFile(filepath.Join(dir, "index.yaml"), 0o644))

	ns := newNamespace(t)
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	remoteService(fixture, srv.URL, "~1.1")
	head := fixture.Commit("web from the Helm repository", "alice@example.com")
	startSyncer(t, ns, "", func(s *syncer.Syncer) {
		s.Reconciler.ChartOptions = chartrepo.Options{HTTPClient: srv.Client()}
	})
	r := newRepository(t, ns, "infra", fixture.FileURL(), withChartCredentials(t, ns, srv.URL, registryUser, registryPass))
	waitHandled(t, r, requestReconcile(t, r))
	cr, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("web-staging", head, 1)]
	require.True(t, ok)
	assert.Equal(t, "1.1.4", cr.Spec.Source.Chart.Version)
	assert.Equal(t, sluicev1.Digest(chartrepo.Digest(tgz)), cr.Spec.Source.Chart.Digest, "the sha256 of the .tgz")
	assert.Equal(t, tgz, artifactFiles(t, cr)[sources.RemoteChartDir+"/"+sources.RemoteChartFile])
	assert.NotEmpty(t, cr.Spec.ManifestDigest, "%+v", cr.Spec.Verdict.Findings)

	before := requests.Load()
	waitHandled(t, r, requestReconcile(t, r))
	t.Logf("FIGURE: re-sync of an unchanged range ~1.1 from a Helm repository made %d requests", requests.Load()-before)
	assert.Equal(t, int64(1), requests.Load()-before, "index.yaml only")
}

// TestSync_aRegistryThatNeverAnswersTimesOutAndHoldsBackNoOtherService:
// every registry request ends at the timeout; the release is retried and
// the Repository's other services sync.
func TestSync_aRegistryThatNeverAnswersTimesOutAndHoldsBackNoOtherService(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-block:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(block) })
	ns := newNamespace(t)
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	fixture.CopyDir(chartDir, "charts/service")
	helmService(fixture, "alpha", "staging")
	remoteService(fixture, "oci://"+strings.TrimPrefix(srv.URL, "https://")+"/charts", "~1.1")
	head := fixture.Commit("web and alpha", "alice@example.com")
	startSyncer(t, ns, "", func(s *syncer.Syncer) {
		s.Reconciler.ChartOptions = chartrepo.Options{HTTPClient: srv.Client(), Timeout: 300 * time.Millisecond}
	})
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	requestReconcile(t, repo)
	cond := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonGitOperationFailed)
	assert.Contains(t, cond.Message, "did not answer within 300ms")
	crs := changeRequests(t, ns)
	assert.Contains(t, crs, sluicev1.ChangeRequestName("alpha-staging", head, 1), "the other service is unaffected")
	assert.NotContains(t, crs, sluicev1.ChangeRequestName("web-staging", head, 1))
}
