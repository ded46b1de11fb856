package artifact

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// TestFetchChange_presentsTheArtifactTokenAndStillVerifiesDigests: against
// an artifact server that requires a bearer token, the fetcher configured
// with the token file downloads, and everything it downloads is still
// checked against the approved digests; without the token, or with a wrong
// one, the download is refused with a message that says what to fix, as a
// retryable error, and the token never appears in an error.
func TestFetchChange_presentsTheArtifactTokenAndStillVerifiesDigests(t *testing.T) {
	const token = "the-syncers-artifact-token-0123456789"
	s := newServer(t)
	s.token = token
	dir := t.TempDir()
	right := filepath.Join(dir, "right")
	require.NoError(t, os.WriteFile(right, []byte(token+"\n"), 0o600))
	wrong := filepath.Join(dir, "wrong")
	require.NoError(t, os.WriteFile(wrong, []byte("not-the-artifact-token-0123456789"), 0o600))

	tarball := tarBytes(t, file("values.yaml", "replicas: 2\n"))
	targz := gz(t, tarball)
	other := gz(t, tarBytes(t, file("values.yaml", "replicas: 200\n")))
	good := change(s.put("good.tar.gz", targz), targz, tarball)
	swapped := change(s.put("swapped.tar.gz", other), targz, tarball)

	fetcher := func(opts ...Option) *Fetcher {
		f, err := NewFetcher(s.URL+"/artifacts/", opts...)
		require.NoError(t, err)
		f.TempDir = t.TempDir()
		return f
	}

	t.Run("with the token, the approved artifact is fetched", func(t *testing.T) {
		c, err := fetcher(WithTokenFile(right)).FetchChange(context.Background(), good)
		require.NoError(t, err)
		require.Equal(t, good.Spec.ContentDigest, c.ContentDigest)
		require.NoError(t, c.Close())
	})
	t.Run("with the token, other bytes are still refused", func(t *testing.T) {
		c, err := fetcher(WithTokenFile(right)).FetchChange(context.Background(), swapped)
		require.Nil(t, c)
		requireFailure(t, err, sluicev1.ReasonDigestMismatch)
	})
	for name, f := range map[string]*Fetcher{
		"without a token":    fetcher(),
		"with a wrong token": fetcher(WithTokenFile(wrong)),
	} {
		t.Run(name+", the download is refused and retried", func(t *testing.T) {
			before := s.hits
			c, err := f.FetchChange(context.Background(), good)
			require.Nil(t, c)
			require.ErrorContains(t, err, "HTTP 401")
			require.ErrorContains(t, err, "--artifact-token-file")
			require.NotContains(t, err.Error(), token)
			_, permanent := applier.AsFailure(err)
			require.False(t, permanent, "a fixed or rotated token heals it")
			require.Equal(t, before, s.hits, "nothing was served")
		})
	}
	t.Run("an unreadable token file is an error before any request", func(t *testing.T) {
		before := s.hits
		_, err := fetcher(WithTokenFile(filepath.Join(dir, "absent"))).FetchChange(context.Background(), good)
		require.ErrorContains(t, err, "read the artifact token")
		require.Equal(t, before, s.hits)
	})
}
