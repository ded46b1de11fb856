package chartrepo_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/registry"
	"helm.sh/helm/v3/pkg/repo"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
)

// packChart packages a chart whose ConfigMap carries marker, as `helm
// package` would.
func packChart(t testing.TB, name, version, marker string) []byte {
	t.Helper()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: name, Version: version, Type: "application"},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  marker: " + marker + "\n")}},
	}
	dir := t.TempDir()
	p, err := chartutil.Save(ch, dir)
	require.NoError(t, err)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return b
}

// helmRepo is a Helm chart repository served over HTTPS from a folder
// whose index.yaml Helm's repo package generates.
type helmRepo struct {
	srv      *httptest.Server
	dir      string
	user     string
	pass     string
	requests atomic.Int64
}

func newHelmRepo(t *testing.T, user, pass string) *helmRepo {
	h := &helmRepo{dir: t.TempDir(), user: user, pass: pass}
	files := http.FileServer(http.Dir(h.dir))
	h.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		if h.user != "" {
			if u, p, ok := r.BasicAuth(); !ok || u != h.user || p != h.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="charts"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(h.srv.Close)
	return h
}

// add writes a chart archive and regenerates index.yaml.
func (h *helmRepo) add(t *testing.T, name, version string, tgz []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(filepath.Join(h.dir, name+"-"+version+".tgz"), tgz, 0o644))
	idx, err := repo.IndexDirectory(h.dir, h.srv.URL)
	require.NoError(t, err)
	require.NoError(t, idx.WriteFile(filepath.Join(h.dir, "index.yaml"), 0o644))
}

func (h *helmRepo) opts() chartrepo.Options {
	o := chartrepo.Options{HTTPClient: h.srv.Client()}
	if h.user != "" {
		o.Credentials = &chartrepo.Credentials{Username: h.user, Password: h.pass}
	}
	return o
}

// ociRegistry is an in-memory OCI registry, optionally behind basic auth,
// counting requests, with a hook that may replace what it serves.
type ociRegistry struct {
	srv      *httptest.Server
	user     string
	pass     string
	requests atomic.Int64
	mu       sync.Mutex
	tamper   func(w http.ResponseWriter, r *http.Request) bool
	reg      http.Handler
}

func newOCIRegistry(t *testing.T, user, pass string) *ociRegistry {
	o := &ociRegistry{user: user, pass: pass}
	o.reg = ggcrregistry.New(ggcrregistry.Logger(log.New(io.Discard, "", 0)))
	reg := o.reg
	o.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.requests.Add(1)
		if o.user != "" {
			if u, p, ok := r.BasicAuth(); !ok || u != o.user || p != o.pass {
				w.Header().Set("WWW-Authenticate", `Basic realm="registry"`)
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
				return
			}
		}
		o.mu.Lock()
		tamper := o.tamper
		o.mu.Unlock()
		if tamper != nil && tamper(w, r) {
			return
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func (o *ociRegistry) host() string { return strings.TrimPrefix(o.srv.URL, "https://") }

func (o *ociRegistry) repoURL() string { return "oci://" + o.host() + "/charts" }

// push pushes a chart with Helm's own registry client.
func (o *ociRegistry) push(t *testing.T, name, version string, tgz []byte) {
	t.Helper()
	opts := []registry.ClientOption{registry.ClientOptHTTPClient(o.srv.Client()),
		registry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json"))}
	if o.user != "" {
		opts = append(opts, registry.ClientOptBasicAuth(o.user, o.pass))
	}
	c, err := registry.NewClient(opts...)
	require.NoError(t, err)
	_, err = c.Push(tgz, o.host()+"/charts/"+name+":"+version, registry.PushOptCreationTime("2026-01-01T00:00:00Z"))
	require.NoError(t, err)
}

func (o *ociRegistry) opts() chartrepo.Options {
	opts := chartrepo.Options{HTTPClient: o.srv.Client()}
	if o.user != "" {
		opts.Credentials = &chartrepo.Credentials{Username: o.user, Password: o.pass}
	}
	return opts
}

func marker(t *testing.T, c *chartrepo.Chart) string {
	t.Helper()
	ch, err := chartrepo.Load(c.TarGz, 0)
	require.NoError(t, err)
	s := string(ch.Templates[0].Data)
	return strings.TrimSpace(s[strings.Index(s, "marker: ")+len("marker: "):])
}

func TestPull_helmRepositoryResolvesARangeToTheHighestMatchAndItsSHA256(t *testing.T) {
	h := newHelmRepo(t, "", "")
	for _, v := range []string{"1.1.0", "1.1.3", "1.2.0"} {
		h.add(t, "web", v, packChart(t, "web", v, "m"+v))
	}
	ctx := context.Background()
	c, err := chartrepo.Pull(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: "web", Version: "~1.1"}, h.opts())
	require.NoError(t, err)
	require.Equal(t, "1.1.3", c.Version)
	require.Equal(t, chartrepo.Digest(c.TarGz), c.Digest)
	require.Nil(t, c.OCIManifest)
	require.Equal(t, "m1.1.3", marker(t, c))

	exact, err := chartrepo.Resolve(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: "web", Version: "1.2.0"}, h.opts())
	require.NoError(t, err)
	require.Equal(t, "1.2.0", exact.Version)

	_, err = chartrepo.Resolve(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: "web", Version: "~2.0"}, h.opts())
	require.ErrorIs(t, err, chartrepo.ErrNoMatch)
	_, err = chartrepo.Resolve(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: "api", Version: "1.0.0"}, h.opts())
	require.ErrorIs(t, err, chartrepo.ErrNotFound)
}

func TestPull_ociRegistryResolvesARangeToTheHighestTagAndItsManifestDigest(t *testing.T) {
	o := newOCIRegistry(t, "", "")
	for _, v := range []string{"1.1.0", "1.1.1", "1.2.0"} {
		o.push(t, "web", v, packChart(t, "web", v, "m"+v))
	}
	ctx := context.Background()
	c, err := chartrepo.Pull(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "~1.1"}, o.opts())
	require.NoError(t, err)
	require.Equal(t, "1.1.1", c.Version)
	require.Equal(t, chartrepo.Digest(c.OCIManifest), c.Digest)
	require.NoError(t, chartrepo.Verify(c.Digest, c.TarGz, c.OCIManifest))
	require.Equal(t, "m1.1.1", marker(t, c))

	_, err = chartrepo.Resolve(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: ">=3.0.0"}, o.opts())
	require.ErrorIs(t, err, chartrepo.ErrNoMatch)
	_, err = chartrepo.Resolve(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "9.9.9"}, o.opts())
	require.ErrorIs(t, err, chartrepo.ErrNotFound)
}

func TestFetch_aMovedOCITagChangesNothingApproved(t *testing.T) {
	o := newOCIRegistry(t, "", "")
	o.push(t, "web", "1.1.0", packChart(t, "web", "1.1.0", "approved"))
	ctx := context.Background()
	ref := chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "1.1.0"}
	approved, err := chartrepo.Resolve(ctx, ref, o.opts())
	require.NoError(t, err)

	o.push(t, "web", "1.1.0", packChart(t, "web", "1.1.0", "moved"))
	now, err := chartrepo.Resolve(ctx, ref, o.opts())
	require.NoError(t, err)
	require.NotEqual(t, approved.Digest, now.Digest, "the moved tag resolves to another digest: a new change")

	c, err := chartrepo.Fetch(ctx, approved, o.opts())
	require.NoError(t, err)
	require.Equal(t, "approved", marker(t, c), "fetching by the approved digest gets the approved bytes")
}

func TestFetch_aMovedHelmRepositoryVersionIsRefused(t *testing.T) {
	h := newHelmRepo(t, "", "")
	h.add(t, "web", "1.1.0", packChart(t, "web", "1.1.0", "approved"))
	ctx := context.Background()
	approved, err := chartrepo.Resolve(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: "web", Version: "1.1.0"}, h.opts())
	require.NoError(t, err)

	h.add(t, "web", "1.1.0", packChart(t, "web", "1.1.0", "moved"))
	_, err = chartrepo.Fetch(ctx, approved, h.opts())
	require.ErrorIs(t, err, chartrepo.ErrDigestMismatch)
	require.ErrorContains(t, err, approved.Digest)
}

func TestFetch_aRegistryServingOtherBytesForTheDigestIsRefused(t *testing.T) {
	o := newOCIRegistry(t, "", "")
	o.push(t, "web", "1.1.0", packChart(t, "web", "1.1.0", "approved"))
	ctx := context.Background()
	approved, err := chartrepo.Resolve(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "1.1.0"}, o.opts())
	require.NoError(t, err)
	evil := packChart(t, "web", "1.1.0", "evil")

	for _, what := range []string{"/blobs/", "/manifests/", "flipped"} {
		t.Run(strings.Trim(what, "/"), func(t *testing.T) {
			o.mu.Lock()
			o.tamper = func(w http.ResponseWriter, r *http.Request) bool {
				if what == "flipped" && r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
					// Same length, one byte changed: only the digest check sees it.
					rec := httptest.NewRecorder()
					o.reg.ServeHTTP(rec, r)
					b := rec.Body.Bytes()
					b[len(b)-1] ^= 0xff
					w.Header().Set("Content-Length", rec.Header().Get("Content-Length"))
					_, _ = w.Write(b)
					return true
				}
				if r.Method != http.MethodGet || !strings.Contains(r.URL.Path, what) {
					return false
				}
				if what == "/manifests/" {
					w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
					_, _ = w.Write([]byte(`{"schemaVersion":2,"layers":[]}`))
					return true
				}
				_, _ = w.Write(evil)
				return true
			}
			o.mu.Unlock()
			t.Cleanup(func() { o.mu.Lock(); o.tamper = nil; o.mu.Unlock() })
			_, err := chartrepo.Fetch(ctx, approved, o.opts())
			require.Error(t, err)
			require.ErrorIs(t, err, chartrepo.ErrDigestMismatch)
		})
	}
}

func TestFetch_aChartOverTheSizeLimitIsRefused(t *testing.T) {
	big := packChart(t, "web", "1.0.0", strings.Repeat("x", 1))
	limit := int64(len(big) - 1)
	ctx := context.Background()

	h := newHelmRepo(t, "", "")
	h.add(t, "web", "1.0.0", big)
	opts := h.opts()
	opts.MaxChartSize = limit
	_, err := chartrepo.Pull(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: "web", Version: "1.0.0"}, opts)
	require.ErrorIs(t, err, chartrepo.ErrTooLarge)

	o := newOCIRegistry(t, "", "")
	o.push(t, "web", "1.0.0", big)
	oopts := o.opts()
	oopts.MaxChartSize = limit
	_, err = chartrepo.Pull(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "1.0.0"}, oopts)
	require.ErrorIs(t, err, chartrepo.ErrTooLarge)
}

func TestResolve_anIndexOverTheSizeLimitStopsWhileItStreams(t *testing.T) {
	var written atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// 100 MB of index, without a Content-Length.
		chunk := bytes.Repeat([]byte("# padding padding padding padding\n"), 1<<12)
		w.Write([]byte("apiVersion: v1\nentries: {}\n"))
		for written.Load() < 100<<20 {
			n, err := w.Write(chunk)
			written.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	_, err := chartrepo.Resolve(context.Background(), chartrepo.Ref{Repo: srv.URL, Name: "web", Version: "1.0.0"},
		chartrepo.Options{HTTPClient: srv.Client(), MaxIndexSize: 1 << 20})
	require.ErrorIs(t, err, chartrepo.ErrTooLarge)
	srv.CloseClientConnections()
	require.Less(t, written.Load(), int64(100<<20), "the client stopped reading at the limit")
}

func TestResolve_aRepositoryThatNeverAnswersTimesOut(t *testing.T) {
	block := make(chan struct{})
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-block:
		}
	}))
	defer srv.Close()
	defer close(block)
	for _, repoURL := range []string{srv.URL, "oci://" + strings.TrimPrefix(srv.URL, "https://") + "/charts"} {
		_, err := chartrepo.Resolve(context.Background(), chartrepo.Ref{Repo: repoURL, Name: "web", Version: "~1.0"},
			chartrepo.Options{HTTPClient: srv.Client(), Timeout: 200 * time.Millisecond})
		require.ErrorIs(t, err, context.DeadlineExceeded, repoURL)
		require.ErrorContains(t, err, "did not answer")
	}
}

func TestResolve_badCredentialsAreRefusedWithoutEchoingThem(t *testing.T) {
	ctx := context.Background()
	h := newHelmRepo(t, "ci", "s3cret-helm")
	h.add(t, "web", "1.0.0", packChart(t, "web", "1.0.0", "m"))
	o := newOCIRegistry(t, "ci", "s3cret-oci")
	o.push(t, "web", "1.0.0", packChart(t, "web", "1.0.0", "m"))

	_, err := chartrepo.Pull(ctx, chartrepo.Ref{Repo: h.srv.URL, Name: "web", Version: "1.0.0"}, h.opts())
	require.NoError(t, err, "the right credentials")
	_, err = chartrepo.Pull(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "~1.0"}, o.opts())
	require.NoError(t, err, "the right credentials")

	for _, tc := range []struct {
		repo string
		opts chartrepo.Options
	}{
		{h.srv.URL, chartrepo.Options{HTTPClient: h.srv.Client(), Credentials: &chartrepo.Credentials{Username: "ci", Password: "wrong-pass-123"}}},
		{h.srv.URL, chartrepo.Options{HTTPClient: h.srv.Client()}},
		{o.repoURL(), chartrepo.Options{HTTPClient: o.srv.Client(), Credentials: &chartrepo.Credentials{Username: "ci", Password: "wrong-pass-123"}}},
		{o.repoURL(), chartrepo.Options{HTTPClient: o.srv.Client()}},
	} {
		for _, v := range []string{"1.0.0", "~1.0"} {
			_, err := chartrepo.Resolve(ctx, chartrepo.Ref{Repo: tc.repo, Name: "web", Version: v}, tc.opts)
			require.ErrorIs(t, err, chartrepo.ErrUnauthorized, "%s %s", tc.repo, v)
			require.NotContains(t, err.Error(), "wrong-pass-123")
		}
	}
}

func TestResolve_refusesURLsWithCredentialsOrOtherSchemes(t *testing.T) {
	for _, repoURL := range []string{"http://charts.example", "https://u:p@charts.example", "file:///etc", "oci://u:p@reg.example/charts"} {
		_, err := chartrepo.Resolve(context.Background(), chartrepo.Ref{Repo: repoURL, Name: "web", Version: "1.0.0"}, chartrepo.Options{})
		require.Error(t, err, repoURL)
		require.NotContains(t, err.Error(), ":p@", repoURL)
	}
	_, err := chartrepo.Resolve(context.Background(), chartrepo.Ref{Repo: "https://charts.example", Name: "../web", Version: "1.0.0"}, chartrepo.Options{})
	require.Error(t, err)
}

// tgzOf builds a .tgz of hdrs (regular files get "x" as content).
func tgzOf(t testing.TB, hdrs ...*tar.Header) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		data := []byte{}
		if h.Typeflag == tar.TypeReg {
			data = []byte("x")
			h.Size = 1
		}
		require.NoError(t, tw.WriteHeader(h))
		_, _ = tw.Write(data)
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func TestLoad_refusesArchivesLeavingTheChartOrHoldingLinks(t *testing.T) {
	chartYAML := &tar.Header{Name: "web/Chart.yaml", Typeflag: tar.TypeReg, Mode: 0o644}
	for name, hdr := range map[string]*tar.Header{
		"dot-dot":  {Name: "web/../../etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644},
		"absolute": {Name: "/etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644},
		"symlink":  {Name: "web/templates/x.yaml", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		"hardlink": {Name: "web/templates/y.yaml", Typeflag: tar.TypeLink, Linkname: "web/Chart.yaml"},
		"device":   {Name: "web/dev", Typeflag: tar.TypeChar},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := chartrepo.Load(tgzOf(t, chartYAML, hdr), 0)
			require.ErrorIs(t, err, chartrepo.ErrUnsafeArchive)
		})
	}
	// A gzip bomb stops at the unpacked bound.
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "web/big", Typeflag: tar.TypeReg, Size: 8 << 20, Mode: 0o644}))
	_, _ = tw.Write(make([]byte, 8<<20))
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	_, err := chartrepo.Load(buf.Bytes(), 1<<20)
	require.ErrorIs(t, err, chartrepo.ErrTooLarge)
}

func FuzzCheckArchive(f *testing.F) {
	f.Add(packChart(f, "web", "1.0.0", "m"))
	f.Add(tgzOf(f, &tar.Header{Name: "../x", Typeflag: tar.TypeReg}))
	f.Add([]byte("not gzip"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := chartrepo.CheckArchive(b, 1<<20); err != nil {
			return
		}
		_, _ = chartrepo.Load(b, 1<<20)
	})
}

func TestResolve_refusesLinkLocalAndMetadataAddresses(t *testing.T) {
	for _, repoURL := range []string{"https://169.254.169.254/charts", "oci://169.254.169.254/charts", "https://[fe80::1]/charts"} {
		_, err := chartrepo.Resolve(context.Background(), chartrepo.Ref{Repo: repoURL, Name: "web", Version: "~1.0"}, chartrepo.Options{Timeout: 5 * time.Second})
		require.ErrorIs(t, err, chartrepo.ErrForbiddenAddress, repoURL)
	}
}

// TestResolve_aListedTagTheRegistryDoesNotServeYetIsToBeAskedAgain: a
// registry notifies a push once the manifest is stored, before the tag
// points at it; a range resolved in between finds the tag listed but not
// served. That is ErrTagNotReady (ask again soon), not ErrNotFound (a
// person must act), and the next resolve gets the tag.
func TestResolve_aListedTagTheRegistryDoesNotServeYetIsToBeAskedAgain(t *testing.T) {
	o := newOCIRegistry(t, "", "")
	o.push(t, "web", "1.1.0", packChart(t, "web", "1.1.0", "a"))
	o.push(t, "web", "1.1.1", packChart(t, "web", "1.1.1", "b"))
	var hidden atomic.Bool
	hidden.Store(true)
	o.mu.Lock()
	o.tamper = func(w http.ResponseWriter, r *http.Request) bool {
		if hidden.Load() && strings.HasSuffix(r.URL.Path, "/manifests/1.1.1") {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"errors":[{"code":"MANIFEST_UNKNOWN","message":"manifest unknown"}]}`))
			return true
		}
		return false
	}
	o.mu.Unlock()
	ctx := context.Background()
	ref := chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "~1.1"}
	_, err := chartrepo.Resolve(ctx, ref, o.opts())
	require.ErrorIs(t, err, chartrepo.ErrTagNotReady)
	require.NotErrorIs(t, err, chartrepo.ErrNotFound)
	// An exact version the registry does not serve is still not found.
	_, err = chartrepo.Resolve(ctx, chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "1.1.1"}, o.opts())
	require.ErrorIs(t, err, chartrepo.ErrNotFound)

	hidden.Store(false)
	got, err := chartrepo.Resolve(ctx, ref, o.opts())
	require.NoError(t, err)
	require.Equal(t, "1.1.1", got.Version)
}

// TestResolve_aKnownResolutionSavesTheTagDigestRequest: with Known (the
// last resolution of the same range), a range still picking Known's
// version asks only for the tag list; one picking another version asks
// for that tag's digest as always.
func TestResolve_aKnownResolutionSavesTheTagDigestRequest(t *testing.T) {
	o := newOCIRegistry(t, "", "")
	o.push(t, "web", "1.1.0", packChart(t, "web", "1.1.0", "a"))
	ctx := context.Background()
	ref := chartrepo.Ref{Repo: o.repoURL(), Name: "web", Version: "~1.1"}
	first, err := chartrepo.Resolve(ctx, ref, o.opts())
	require.NoError(t, err)

	opts := o.opts()
	opts.Known = first
	before := o.requests.Load()
	again, err := chartrepo.Resolve(ctx, ref, opts)
	require.NoError(t, err)
	require.Equal(t, *first, *again)
	require.Equal(t, int64(1), o.requests.Load()-before, "the tag list only")

	o.push(t, "web", "1.1.1", packChart(t, "web", "1.1.1", "b"))
	before = o.requests.Load()
	newer, err := chartrepo.Resolve(ctx, ref, opts)
	require.NoError(t, err)
	require.Equal(t, "1.1.1", newer.Version)
	require.NotEqual(t, first.Digest, newer.Digest)
	require.Equal(t, int64(2), o.requests.Load()-before, "the tag list and the new tag's digest")
}
