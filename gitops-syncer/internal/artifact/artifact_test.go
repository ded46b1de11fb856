package artifact_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
)

func sampleFS(when time.Time, mode fs.FileMode) fstest.MapFS {
	return fstest.MapFS{
		"services/checkout/service.yaml":       {Data: []byte("name: checkout\n"), ModTime: when, Mode: mode},
		"services/checkout/values.yaml":        {Data: []byte("replicas: 1\n"), ModTime: when, Mode: mode},
		"services/checkout/terraform/main.tf":  {Data: []byte("resource \"terraform_data\" \"x\" {}\n"), ModTime: when, Mode: mode},
		"services/checkout/hooks/run.sh":       {Data: []byte("#!/bin/sh\n"), ModTime: when, Mode: 0o755},
		"charts/service/Chart.yaml":            {Data: []byte("name: service\n"), ModTime: when, Mode: mode},
		"charts/service/templates/deploy.yaml": {Data: []byte("kind: Deployment\n"), ModTime: when, Mode: mode},
		"services/cart/values.yaml":            {Data: []byte("replicas: 3\n"), ModTime: when, Mode: mode},
	}
}

func TestBuild_isReproducibleWhateverTheTimesAndModes(t *testing.T) {
	paths := []string{"services/checkout", "charts/service", "modules/missing"}
	a, err := artifact.Build(sampleFS(time.Unix(1, 0), 0o600), paths)
	require.NoError(t, err)
	b, err := artifact.Build(sampleFS(time.Now(), 0o664), []string{"charts/service", "services/checkout/", "services/checkout"})
	require.NoError(t, err)
	assert.Equal(t, a.ContentDigest, b.ContentDigest)
	assert.Equal(t, a.SHA256, b.SHA256)
	assert.Equal(t, a.TarGz, b.TarGz)

	got, err := artifact.ContentDigestOfTarGz(a.TarGz)
	require.NoError(t, err)
	assert.Equal(t, a.ContentDigest, got)

	zr, err := gzip.NewReader(bytes.NewReader(a.TarGz))
	require.NoError(t, err)
	assert.True(t, zr.ModTime.IsZero())
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
		assert.Equal(t, int64(0), h.ModTime.Unix(), h.Name)
		assert.Zero(t, h.Uid)
		assert.Empty(t, h.Uname)
		if h.Name == "services/checkout/hooks/run.sh" {
			assert.EqualValues(t, 0o755, h.Mode)
		} else if h.Typeflag == tar.TypeReg {
			assert.EqualValues(t, 0o644, h.Mode)
		}
	}
	assert.Equal(t, []string{
		"charts/", "charts/service/", "charts/service/Chart.yaml", "charts/service/templates/", "charts/service/templates/deploy.yaml",
		"services/", "services/checkout/", "services/checkout/hooks/", "services/checkout/hooks/run.sh",
		"services/checkout/service.yaml", "services/checkout/terraform/", "services/checkout/terraform/main.tf", "services/checkout/values.yaml",
	}, names)

	changed := sampleFS(time.Now(), 0o644)
	changed["charts/service/Chart.yaml"] = &fstest.MapFile{Data: []byte("name: service2\n")}
	c, err := artifact.Build(changed, paths)
	require.NoError(t, err)
	assert.NotEqual(t, a.ContentDigest, c.ContentDigest)
}

func TestBuild_refusesSymlinksLeavingTheRepository(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "svc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "svc", "values.yaml"), []byte("a: 1\n"), 0o644))
	require.NoError(t, os.Symlink("values.yaml", filepath.Join(dir, "svc", "inside.yaml")))
	a, err := artifact.Build(os.DirFS(dir), []string{"svc"})
	require.NoError(t, err)

	out := t.TempDir()
	require.NoError(t, artifact.Extract(a.TarGz, out))
	data, err := os.ReadFile(filepath.Join(out, "svc", "inside.yaml"))
	require.NoError(t, err)
	assert.Equal(t, "a: 1\n", string(data))

	require.NoError(t, os.Symlink("../../etc/passwd", filepath.Join(dir, "svc", "escape")))
	_, err = artifact.Build(os.DirFS(dir), []string{"svc"})
	assert.ErrorContains(t, err, "outside the repository")
}

func tarGz(t testing.TB, entries ...*tar.Header) []byte {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, h := range entries {
		require.NoError(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write(make([]byte, h.Size))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	a, err := artifact.FromTar(raw.Bytes())
	require.NoError(t, err)
	return a.TarGz
}

func TestExtract_keepsEveryEntryInsideTheFolder(t *testing.T) {
	for name, entries := range map[string][]*tar.Header{
		"a dot-dot name":                      {{Name: "../evil", Typeflag: tar.TypeReg, Size: 1}},
		"an absolute name":                    {{Name: "/etc/evil", Typeflag: tar.TypeReg, Size: 1}},
		"an escaping symlink":                 {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "../x"}},
		"a file below a symlink":              {{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "."}, {Name: "l/f", Typeflag: tar.TypeReg, Size: 1}},
		"a symlink resolving through another": {{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "."}, {Name: "b", Typeflag: tar.TypeSymlink, Linkname: "a/.."}},
		"a hard link":                         {{Name: "h", Typeflag: tar.TypeLink, Linkname: "x"}},
		"a device":                            {{Name: "d", Typeflag: tar.TypeChar}},
	} {
		t.Run(name, func(t *testing.T) {
			parent := t.TempDir()
			dir := filepath.Join(parent, "out")
			require.NoError(t, os.Mkdir(dir, 0o755))
			assert.Error(t, artifact.Extract(tarGz(t, entries...), dir))
			_, err := os.Stat(filepath.Join(parent, "evil"))
			assert.True(t, os.IsNotExist(err))
		})
	}
}

type rebuilder struct {
	calls int
	a     *artifact.Artifact
}

func (r *rebuilder) RebuildArtifact(context.Context, artifact.Key) (*artifact.Artifact, error) {
	r.calls++
	return r.a, nil
}

func TestServer_servesWithTheSHA256AndRebuildsWhatIsMissing(t *testing.T) {
	a, err := artifact.Build(sampleFS(time.Now(), 0o644), []string{"services/checkout"})
	require.NoError(t, err)
	store := &artifact.Store{Dir: t.TempDir()}
	rb := &rebuilder{a: a}
	srv := httptest.NewServer(&artifact.Server{Store: store, Rebuilder: rb, Token: artifact.StaticToken(testToken), Log: logr.Discard()})
	defer srv.Close()
	k := artifact.Key{Namespace: "team", Repository: "infra", Revision: "0123456789abcdef0123456789abcdef01234567", Release: "checkout-staging"}

	get := func(path string) (*http.Response, []byte) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return resp, b.Bytes()
	}
	resp, body := get(k.Path())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, a.TarGz, body)
	assert.Equal(t, a.SHA256, resp.Header.Get(artifact.HeaderSHA256))
	assert.Equal(t, 1, rb.calls)
	_, body = get(k.Path())
	assert.Equal(t, a.TarGz, body)
	assert.Equal(t, 1, rb.calls, "a stored artifact is not rebuilt")

	resp, _ = get("/artifacts/team/infra/../../etc/passwd.tar.gz")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, _ = get("/artifacts/team/infra/main/checkout-staging.tar.gz")
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
}

func FuzzExtract(f *testing.F) {
	f.Add([]byte{})
	a, _ := artifact.Build(sampleFS(time.Now(), 0o644), []string{"services", "charts"})
	f.Add(a.TarGz)
	f.Add(tarGz(f, &tar.Header{Name: "../x", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(tarGz(f, &tar.Header{Name: "l", Typeflag: tar.TypeSymlink, Linkname: "."}, &tar.Header{Name: "m", Typeflag: tar.TypeSymlink, Linkname: "l/.."}))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dir := filepath.Join(parent, "out")
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = artifact.Extract(data, dir)
		entries, err := os.ReadDir(parent)
		if err != nil || len(entries) != 1 {
			t.Fatalf("extract wrote outside its folder: %v", entries)
		}
		// Every symlink written must resolve inside the folder.
		_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&fs.ModeSymlink != 0 {
				real, rerr := filepath.EvalSymlinks(p)
				if rerr == nil {
					rel, _ := filepath.Rel(dir, real)
					if rel == ".." || len(rel) > 2 && rel[:3] == "../" {
						t.Fatalf("symlink %s escapes to %s", p, real)
					}
				}
			}
			return nil
		})
	})
}

func FuzzParsePath(f *testing.F) {
	for _, s := range []string{
		"/artifacts/team/infra/0123456789abcdef0123456789abcdef01234567/checkout-staging.tar.gz",
		"/artifacts/team/infra/0123456789abcdef0123456789abcdef01234567/checkout-staging/" + strings.Repeat("ab", 32) + ".tar.gz",
		"/artifacts/team/infra/0123456789abcdef0123456789abcdef01234567/checkout-staging/.tar.gz",
		"/artifacts/../../x.tar.gz", "/artifacts/a/b/c/d", "/", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		k, err := artifact.ParsePath(p)
		if err == nil && k.Path() != p {
			t.Fatalf("ParsePath(%q) = %+v, which prints as %q", p, k, k.Path())
		}
	})
}

// TestStore_artifactsOfOneReleaseAndCommitAreKeptByTheirSHA256: two
// changes at one commit (a chart re-resolved to other bytes) each keep
// their own artifact; a key naming a sha256 takes only those bytes and
// its path round-trips; keys of the older form still work.
func TestStore_artifactsOfOneReleaseAndCommitAreKeptByTheirSHA256(t *testing.T) {
	store := &artifact.Store{Dir: t.TempDir()}
	base := artifact.Key{Namespace: "team", Repository: "infra", Revision: "0123456789abcdef0123456789abcdef01234567", Release: "checkout-staging"}
	one, two := []byte("first change's bytes"), []byte("second change's bytes")
	k1, k2 := base.WithDigest(artifact.Digest(one)), base.WithDigest(artifact.Digest(two))
	require.NoError(t, store.Put(k1, one))
	require.NoError(t, store.Put(k2, two))
	for k, want := range map[artifact.Key][]byte{k1: one, k2: two} {
		got, err := store.Get(k)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		parsed, err := artifact.ParsePath(k.Path())
		require.NoError(t, err)
		assert.Equal(t, k, parsed)
	}
	assert.NotEqual(t, k1.Path(), k2.Path())

	err := store.Put(k1, two)
	require.ErrorContains(t, err, "the bytes are "+artifact.Digest(two))
	got, _ := store.Get(k1)
	assert.Equal(t, one, got, "a refused Put leaves the stored bytes")

	require.NoError(t, store.Put(base, one))
	got, err = store.Get(base)
	require.NoError(t, err)
	assert.Equal(t, one, got)

	for _, bad := range []string{"ABAB", strings.Repeat("g", 64), strings.Repeat("a", 63), "../" + strings.Repeat("a", 61)} {
		k := base
		k.SHA256 = bad
		require.Error(t, k.Validate(), bad)
		require.Error(t, store.Put(k, one), bad)
	}
	_, err = artifact.ParsePath("/artifacts/team/infra/0123456789abcdef0123456789abcdef01234567/checkout-staging/.tar.gz")
	require.Error(t, err)
}
