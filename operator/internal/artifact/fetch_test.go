package artifact

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// server serves named blobs under /artifacts/ and counts requests.
type server struct {
	*httptest.Server
	mu    sync.Mutex
	blobs map[string][]byte
	hits  int
	// token, when set, is the bearer token every artifact request must
	// carry, as the syncer's artifact server requires.
	token string
}

func newServer(t *testing.T) *server {
	s := &server{blobs: map[string][]byte{}}
	mux := http.NewServeMux()
	mux.HandleFunc("/artifacts/", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		if s.token != "" && r.Header.Get("Authorization") != "Bearer "+s.token {
			s.mu.Unlock()
			http.Error(w, "the artifact server needs a bearer token", http.StatusUnauthorized)
			return
		}
		s.hits++
		b, ok := s.blobs[strings.TrimPrefix(r.URL.Path, "/artifacts/")]
		s.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(b)
	})
	mux.HandleFunc("/elsewhere/", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("not an artifact"))
	})
	mux.HandleFunc("/artifacts/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere/x.tar.gz", http.StatusFound)
	})
	s.Server = httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

func (s *server) put(name string, b []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blobs[name] = b
	return s.URL + "/artifacts/" + name
}

// change builds a ChangeRequest for an artifact whose digests are right.
func change(url string, targz, tarball []byte) *sluicev1.ChangeRequest {
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "checkout-staging-0123456789", Namespace: "sluice"},
		Spec: sluicev1.ChangeRequestSpec{
			Release:        "checkout-staging",
			Artifact:       sluicev1.ArtifactReference{URL: url, SHA256: digestOf(targz)},
			ContentDigest:  digestOf(tarball),
			ManifestDigest: digestOf([]byte("manifests")),
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	return cr
}

func newFetcher(t *testing.T, s *server) *Fetcher {
	f, err := NewFetcher(s.URL + "/artifacts/")
	require.NoError(t, err)
	f.TempDir = t.TempDir()
	return f
}

func requireFailure(t *testing.T, err error, reason string) *applier.Failure {
	t.Helper()
	f, ok := applier.AsFailure(err)
	require.True(t, ok, "want a permanent failure, got %v", err)
	require.Equal(t, reason, f.Reason, f.Error())
	return f
}

func TestFetchChange_verifiesAndExtractsThenCloseRemovesEverything(t *testing.T) {
	s := newServer(t)
	f := newFetcher(t, s)
	tarball := tarBytes(t, file("services/checkout/service.yaml", "name: checkout\n"))
	targz := gz(t, tarball)
	cr := change(s.put("a.tar.gz", targz), targz, tarball)

	c, err := f.FetchChange(context.Background(), cr)
	require.NoError(t, err)
	require.Equal(t, cr.Spec.ContentDigest, c.ContentDigest)
	require.Equal(t, cr.Spec.Artifact.SHA256, c.ArchiveSHA256)
	b, err := os.ReadFile(filepath.Join(c.Dir, "services/checkout/service.yaml"))
	require.NoError(t, err)
	require.Equal(t, "name: checkout\n", string(b))
	fi, err := os.Stat(c.Dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), "private folder")

	require.NoError(t, c.Close())
	left, err := os.ReadDir(f.TempDir)
	require.NoError(t, err)
	require.Empty(t, left, "Close removes the folder and the download")
}

// A change that carries a verification, or is a rollback, has both in its
// approvalDigest: the fetch accepts it as recorded (the real appliers
// refused every such change before), and refuses it when the checks or
// the rollback were changed after the digest was computed.
func TestFetchChange_verificationAndRollbackAreInTheApprovalDigest(t *testing.T) {
	s := newServer(t)
	tarball := tarBytes(t, file("values.yaml", "replicas: 2\n"))
	targz := gz(t, tarball)
	url := s.put("v.tar.gz", targz)
	checked := func() *sluicev1.ChangeRequest {
		cr := change(url, targz, tarball)
		cr.Spec.Verification = &sluicev1.VerificationSpec{PrometheusURL: "http://prometheus:9090", Checks: []sluicev1.MetricCheck{{
			Name: "error-rate", Query: "sum(rate(errors[1m]))", SuccessCondition: "result < 0.005"}}}
		cr.Spec.Rollback = &sluicev1.RollbackSpec{Of: "checkout-staging-bbbbbbbbbb", To: "checkout-staging-aaaaaaaaaa"}
		cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
		return cr
	}
	c, err := newFetcher(t, s).FetchChange(context.Background(), checked())
	require.NoError(t, err)
	require.NoError(t, c.Close())

	weakened := checked()
	weakened.Spec.Verification.Checks[0].SuccessCondition = "result < 1"
	_, err = newFetcher(t, s).FetchChange(context.Background(), weakened)
	requireFailure(t, err, sluicev1.ReasonDigestMismatch)

	retargeted := checked()
	retargeted.Spec.Rollback.To = "checkout-staging-cccccccccc"
	_, err = newFetcher(t, s).FetchChange(context.Background(), retargeted)
	requireFailure(t, err, sluicev1.ReasonDigestMismatch)
}

func TestFetchChange_refusesContentOtherThanTheDigestsSay(t *testing.T) {
	s := newServer(t)
	tarball := tarBytes(t, file("values.yaml", "replicas: 2\n"))
	targz := gz(t, tarball)
	other := tarBytes(t, file("values.yaml", "replicas: 200\n"))
	otherGz := gz(t, other)

	cases := []struct {
		name   string
		cr     func() *sluicev1.ChangeRequest
		reason string
		says   string
	}{
		{name: "the server sends other bytes than artifact.sha256 says", reason: sluicev1.ReasonDigestMismatch, says: "has sha256",
			cr: func() *sluicev1.ChangeRequest { return change(s.put("swapped.tar.gz", otherGz), targz, tarball) }},
		{name: "the archive matches but its content is not contentDigest", reason: sluicev1.ReasonDigestMismatch, says: "contentDigest",
			cr: func() *sluicev1.ChangeRequest {
				cr := change(s.put("relabelled.tar.gz", otherGz), otherGz, other)
				cr.Spec.ContentDigest = digestOf(tarball)
				cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
				return cr
			}},
		{name: "the approvalDigest was not computed from these digests", reason: sluicev1.ReasonDigestMismatch, says: "approvalDigest",
			cr: func() *sluicev1.ChangeRequest {
				cr := change(s.put("ok.tar.gz", targz), targz, tarball)
				cr.Spec.ManifestDigest = digestOf([]byte("other manifests"))
				return cr
			}},
		{name: "the approvalDigest belongs to another release", reason: sluicev1.ReasonDigestMismatch, says: "approvalDigest",
			cr: func() *sluicev1.ChangeRequest {
				cr := change(s.put("ok.tar.gz", targz), targz, tarball)
				cr.Spec.ApprovalDigest = sluicev1.ComputeApprovalDigest("sluice", "checkout-prod", cr.Spec.ContentDigest, cr.Spec.ManifestDigest, "")
				return cr
			}},
		{name: "the archive is not gzip", reason: sluicev1.ReasonDigestMismatch, says: "not a gzip stream",
			cr: func() *sluicev1.ChangeRequest { return change(s.put("raw.tar", tarball), tarball, tarball) }},
		{name: "the URL is on another server", reason: sluicev1.ReasonURLNotAllowed, says: "outside the configured artifact server",
			cr: func() *sluicev1.ChangeRequest {
				return change("http://artifacts.invalid/artifacts/ok.tar.gz", targz, tarball)
			}},
		{name: "the URL climbs out of the base path", reason: sluicev1.ReasonURLNotAllowed, says: "outside",
			cr: func() *sluicev1.ChangeRequest {
				return change(s.URL+"/artifacts/../elsewhere/x.tar.gz", targz, tarball)
			}},
		{name: "the URL climbs out with escaped dots", reason: sluicev1.ReasonURLNotAllowed, says: "outside",
			cr: func() *sluicev1.ChangeRequest {
				return change(s.URL+"/artifacts/%2e%2e/elsewhere/x.tar.gz", targz, tarball)
			}},
		{name: "the URL carries credentials", reason: sluicev1.ReasonURLNotAllowed, says: "outside",
			cr: func() *sluicev1.ChangeRequest {
				return change(strings.Replace(s.URL, "http://", "http://user:secret@", 1)+"/artifacts/ok.tar.gz", targz, tarball)
			}},
		{name: "the server redirects outside the base path", reason: sluicev1.ReasonURLNotAllowed, says: "redirected outside",
			cr: func() *sluicev1.ChangeRequest { return change(s.URL+"/artifacts/redirect", targz, tarball) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFetcher(t, s)
			c, err := f.FetchChange(context.Background(), tc.cr())
			require.Nil(t, c)
			fail := requireFailure(t, err, tc.reason)
			require.Contains(t, fail.Error(), tc.says)
			require.NotContains(t, fail.Error(), "secret", "credentials never appear in errors")
			left, err := os.ReadDir(f.TempDir)
			require.NoError(t, err)
			require.Empty(t, left, "nothing is left on disk")
		})
	}
}

func TestFetchChange_refusesAnUnsafeArchiveEvenWithMatchingDigests(t *testing.T) {
	s := newServer(t)
	f := newFetcher(t, s)
	tarball := tarBytes(t, symlink("link", "/etc"), file("link/passwd", "x"))
	targz := gz(t, tarball)
	_, err := f.FetchChange(context.Background(), change(s.put("evil.tar.gz", targz), targz, tarball))
	fail := requireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Error(), "absolute path")
	left, err := os.ReadDir(f.TempDir)
	require.NoError(t, err)
	require.Empty(t, left)
}

func TestFetchChange_refusesAnOversizedDownload(t *testing.T) {
	s := newServer(t)
	f := newFetcher(t, s)
	f.Limits = Limits{MaxArchiveBytes: 1024}
	noise := make([]byte, 8192)
	_, _ = rand.Read(noise)
	tarball := tarBytes(t, file("a", string(noise)))
	targz := gz(t, tarball)
	require.Greater(t, len(targz), 1024)
	_, err := f.FetchChange(context.Background(), change(s.put("big.tar.gz", targz), targz, tarball))
	fail := requireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Error(), "over the 1024-byte limit")
}

func TestFetchChange_aMissingArtifactIsRetriedNotFailed(t *testing.T) {
	s := newServer(t)
	f := newFetcher(t, s)
	tarball := tarBytes(t, file("a", "x"))
	targz := gz(t, tarball)
	_, err := f.FetchChange(context.Background(), change(s.URL+"/artifacts/missing.tar.gz", targz, tarball))
	require.ErrorContains(t, err, "HTTP 404")
	_, permanent := applier.AsFailure(err)
	require.False(t, permanent, "the syncer rebuilds a missing artifact; a 404 is worth a retry")
}

func TestNewFetcher_refusesABadBaseURL(t *testing.T) {
	for _, base := range []string{"", "ftp://host/", "http://user:pw@host/", "http://host/?q=1", "/relative"} {
		_, err := NewFetcher(base)
		require.Error(t, err, base)
	}
}
