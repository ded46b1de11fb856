package artifact_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
)

// testToken is the artifact token of the tests' servers.
const testToken = "artifact-token-for-the-tests-0123456789"

// tokenServer serves one stored artifact behind tokens and counts rebuilds.
func tokenServer(t *testing.T, tokens artifact.TokenSource) (*httptest.Server, *rebuilder, artifact.Key, *artifact.Artifact) {
	t.Helper()
	a, err := artifact.Build(sampleFS(time.Now(), 0o644), []string{"services/checkout"})
	require.NoError(t, err)
	store := &artifact.Store{Dir: t.TempDir()}
	k := artifact.Key{Namespace: "team", Repository: "infra", Revision: "0123456789abcdef0123456789abcdef01234567", Release: "checkout-staging"}
	require.NoError(t, store.Put(k, a.TarGz))
	rb := &rebuilder{a: a}
	srv := httptest.NewServer(&artifact.Server{Store: store, Rebuilder: rb, Token: tokens, Log: logr.Discard()})
	t.Cleanup(srv.Close)
	return srv, rb, k, a
}

// fetch GETs path with the Authorization header auth ("" sends none).
func fetch(t *testing.T, srv *httptest.Server, path, auth string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, body
}

// TestServer_servesOnlyCallersWithTheToken: whoever reaches the artifact
// server's port (any pod, a runner running pushed Terraform code) gets
// nothing, not even a rebuild, without the operator's bearer token.
func TestServer_servesOnlyCallersWithTheToken(t *testing.T) {
	srv, rb, k, a := tokenServer(t, artifact.StaticToken(testToken))
	missing := k
	missing.Release = "checkout-prod" // not stored: a request would rebuild it.
	for _, tc := range []struct {
		name, auth string
		want       int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"a wrong token", "Bearer " + testToken + "x", http.StatusUnauthorized},
		{"a prefix of the token", "Bearer " + testToken[:20], http.StatusUnauthorized},
		{"the token as basic credentials", "Basic " + testToken, http.StatusUnauthorized},
		{"an empty bearer token", "Bearer ", http.StatusUnauthorized},
		{"the right token", "Bearer " + testToken, http.StatusOK},
		{"the right token, scheme in lower case", "bearer " + testToken, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := fetch(t, srv, k.Path(), tc.auth)
			assert.Equal(t, tc.want, code)
			if tc.want == http.StatusOK {
				assert.Equal(t, a.TarGz, body)
			} else {
				assert.NotContains(t, string(body), testToken)
			}
			code, _ = fetch(t, srv, missing.Path(), tc.auth)
			assert.Equal(t, tc.want, code, "a missing artifact")
		})
	}
	assert.Equal(t, 1, rb.calls, "only the first authenticated request for the missing artifact rebuilt it")
}

// TestServer_refusesEveryoneWithoutAUsableToken: a server whose token is
// not configured, unreadable or too short fails closed.
func TestServer_refusesEveryoneWithoutAUsableToken(t *testing.T) {
	dir := t.TempDir()
	short := filepath.Join(dir, "short")
	require.NoError(t, os.WriteFile(short, []byte("abc\n"), 0o600))
	for name, tokens := range map[string]artifact.TokenSource{
		"no token source": nil,
		"a missing file":  artifact.TokenFile(filepath.Join(dir, "absent")),
		"a short token":   artifact.TokenFile(short),
		"an empty token":  artifact.StaticToken(""),
	} {
		t.Run(name, func(t *testing.T) {
			srv, rb, k, _ := tokenServer(t, tokens)
			for _, auth := range []string{"", "Bearer ", "Bearer abc"} {
				code, _ := fetch(t, srv, k.Path(), auth)
				assert.Equal(t, http.StatusServiceUnavailable, code, "auth %q", auth)
			}
			assert.Zero(t, rb.calls)
		})
	}
}

// TestTokenFile_followsTheFile: a rotated Secret (the file replaced) takes
// effect at the next request; the trailing newline is not part of it.
func TestTokenFile_followsTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(path, []byte(testToken+"\n"), 0o600))
	srv, _, k, _ := tokenServer(t, artifact.TokenFile(path))
	code, _ := fetch(t, srv, k.Path(), "Bearer "+testToken)
	assert.Equal(t, http.StatusOK, code)

	rotated := "a-rotated-artifact-token-9876543210"
	require.NoError(t, os.WriteFile(path, []byte(rotated), 0o600))
	code, _ = fetch(t, srv, k.Path(), "Bearer "+testToken)
	assert.Equal(t, http.StatusUnauthorized, code, "the old token after rotation")
	code, _ = fetch(t, srv, k.Path(), "Bearer "+rotated)
	assert.Equal(t, http.StatusOK, code)
}
