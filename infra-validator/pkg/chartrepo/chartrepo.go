// Package chartrepo resolves a chart from a Helm chart repository (an
// index.yaml over HTTPS) or an OCI registry (oci://) to one exact version
// and digest, fetches the chart by that digest and checks its bytes, and
// loads the .tgz only after checking every entry (no "../", no absolute
// path, no link, bounded size).
//
// The digest of a chart from a Helm repository is the sha256 of its .tgz;
// the digest of a chart from an OCI registry is its manifest's digest, and
// the .tgz is the chart layer that manifest names by its own digest, so
// Verify checks both. Everything read from a repository is bounded while
// it streams (index, manifest, chart), and every request ends at the
// Options' timeout. Credentials are sent only to the repository's host and
// never appear in an error. VerifySignature (verify.go) checks a fetched
// chart's provenance file or cosign signature where a Repository asks for
// one.
//
// Exported API:
//
//	type Ref struct{ Repo, Name, Version string }
//	type Credentials struct{ Username, Password string }
//	type Options struct{ Credentials *Credentials; HTTPClient *http.Client; Timeout time.Duration;
//	    MaxChartSize, MaxIndexSize int64; Session *Session }
//	type Session struct{ … }; func NewSession() *Session
//	type Resolved struct{ Repo, Name, Version, Digest, URL string }
//	type Chart struct{ Resolved; TarGz, OCIManifest []byte }
//	func IsOCI(repo string) bool
//	func Resolve(ctx context.Context, ref Ref, opts Options) (*Resolved, error)
//	func Fetch(ctx context.Context, r *Resolved, opts Options) (*Chart, error)
//	func Pull(ctx context.Context, ref Ref, opts Options) (*Chart, error)
//	func Verify(digest string, tgz, ociManifest []byte) error
//	func Load(tgz []byte, maxUnpacked int64) (*chart.Chart, error)
//	type Provider string; const Provenance, Cosign Provider
//	type Verification struct{ Provider Provider; Keyring []byte; PublicKeys [][]byte }
//	func VerifySignature(ctx context.Context, c *Chart, v *Verification, opts Options) error
//	var ErrNoMatch, ErrDigestMismatch, ErrTooLarge, ErrUnsafeArchive, ErrUnauthorized, ErrNotFound, ErrForbiddenAddress, ErrSignature
package chartrepo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// Defaults of Options.
const (
	DefaultMaxChartSize = 16 << 20
	DefaultMaxIndexSize = 32 << 20
	DefaultTimeout      = 60 * time.Second
	// DefaultMaxUnpacked bounds the files of a chart once unpacked.
	DefaultMaxUnpacked = 64 << 20
	// maxManifestSize bounds an OCI manifest.
	maxManifestSize = 4 << 20
)

var (
	// ErrNoMatch: no version of the chart matches the version or range.
	ErrNoMatch = errors.New("no chart version matches")
	// ErrDigestMismatch: the repository served other bytes than the digest names.
	ErrDigestMismatch = errors.New("the repository served other bytes than the digest names")
	// ErrTooLarge: an index, manifest or chart is over its size limit.
	ErrTooLarge = errors.New("over the size limit")
	// ErrUnsafeArchive: a chart archive holds a path leaving the chart, a link or a special file.
	ErrUnsafeArchive = errors.New("unsafe chart archive")
	// ErrUnauthorized: the repository refused the credentials (or asked for some).
	ErrUnauthorized = errors.New("the repository refused the credentials")
	// ErrNotFound: the repository has no such chart or version.
	ErrNotFound = errors.New("not found in the repository")
	// ErrTagNotReady: the registry lists a tag it does not serve yet (a
	// registry notifies a push once the manifest is stored, before the
	// tag points at it): asking again shortly is the answer, not a
	// person.
	ErrTagNotReady = errors.New("the registry lists the tag but does not serve it yet")
)

// Ref names a chart as service.yaml does: a repository URL (https:// or
// oci://), the chart's name and an exact version or a semver range.
type Ref struct {
	Repo, Name, Version string
}

// Credentials are a Repository's basic-auth (or token as password)
// credentials for chart repositories.
type Credentials struct {
	Username, Password string
}

// Options bound and authenticate the requests. Zero values take the
// defaults above.
type Options struct {
	Credentials *Credentials
	// HTTPClient's transport is used (tests pass one trusting their
	// server); nil means http.DefaultTransport.
	HTTPClient *http.Client
	// Timeout bounds each of Resolve and Fetch.
	Timeout      time.Duration
	MaxChartSize int64
	MaxIndexSize int64
	// Session, when set, carries a registry's auth challenge from one
	// call to the next (for Credentials only).
	Session *Session
	// Known is an earlier resolution of the same Ref. Resolving a range
	// from an OCI registry whose highest matching tag is still Known's
	// version then takes Known's digest instead of asking the registry
	// for the tag's manifest again: a re-sync of an unchanged range is
	// one request (the tag list). The caller decides how long a known
	// digest is trusted (a tag moved in the registry is noticed only once
	// it stops passing one).
	Known *Resolved
}

func (o Options) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

func (o Options) maxChart() int64 {
	if o.MaxChartSize > 0 {
		return o.MaxChartSize
	}
	return DefaultMaxChartSize
}

func (o Options) maxIndex() int64 {
	if o.MaxIndexSize > 0 {
		return o.MaxIndexSize
	}
	return DefaultMaxIndexSize
}

// httpClient is a client using the Options' transport with no redirect
// to another host (credentials and trust stay with the repository).
func (o Options) httpClient() *http.Client {
	c := &http.Client{Timeout: o.timeout(), Transport: guardedTransport}
	if o.HTTPClient != nil {
		c.Transport = o.HTTPClient.Transport
	}
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		if req.URL.Scheme != "https" {
			return fmt.Errorf("redirect to %s refused: not https", req.URL.Scheme)
		}
		if req.URL.Host != via[0].URL.Host {
			req.Header.Del("Authorization")
		}
		return nil
	}
	return c
}

// guardedTransport is http.DefaultTransport refusing to connect to
// link-local and cloud metadata addresses: a chart repository URL comes
// from a pusher's service.yaml. The check is on the address dialled, so
// DNS cannot move it after a check.
var guardedTransport = func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	d := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		if a, err := netip.ParseAddr(host); err == nil && forbiddenAddr(a) {
			return fmt.Errorf("%w: %s is a link-local or metadata address", ErrForbiddenAddress, host)
		}
		return nil
	}}
	t.DialContext = d.DialContext
	return t
}()

// ErrForbiddenAddress: the repository's host is a link-local or cloud
// metadata address.
var ErrForbiddenAddress = errors.New("chart repository address refused")

// metadataAddrs are metadata addresses outside the link-local ranges.
var metadataAddrs = map[netip.Addr]bool{
	netip.MustParseAddr("100.100.100.200"): true, // Alibaba Cloud
	netip.MustParseAddr("fd00:ec2::254"):   true, // AWS IPv6
	netip.MustParseAddr("192.0.0.192"):     true, // Oracle Cloud (legacy)
}

func forbiddenAddr(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() || metadataAddrs[a]
}

// Resolved is one exact chart version and its digest ("sha256:<hex>").
// URL is where a Helm repository serves the .tgz (empty for OCI).
type Resolved struct {
	Repo    string `json:"repo"`
	Name    string `json:"name"`
	Version string `json:"version"`
	Digest  string `json:"digest"`
	URL     string `json:"url,omitempty"`
}

// Chart is a fetched chart whose bytes match its digest: the .tgz and,
// for OCI, the manifest whose digest is Digest.
type Chart struct {
	Resolved
	TarGz       []byte
	OCIManifest []byte
}

// IsOCI reports whether repo is an OCI registry reference.
func IsOCI(repo string) bool { return strings.HasPrefix(repo, "oci://") }

// Resolve picks the one exact version of ref (the highest matching a
// range) and its digest.
func Resolve(ctx context.Context, ref Ref, opts Options) (*Resolved, error) {
	if err := checkRef(ref); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout())
	defer cancel()
	if IsOCI(ref.Repo) {
		return resolveOCI(ctx, ref, opts)
	}
	return resolveHTTP(ctx, ref, opts)
}

// Fetch fetches the chart r names by its digest and checks the bytes
// (Verify): a moved tag or a repository serving other bytes under the same
// version is ErrDigestMismatch.
func Fetch(ctx context.Context, r *Resolved, opts Options) (*Chart, error) {
	if err := checkRef(Ref{Repo: r.Repo, Name: r.Name, Version: r.Version}); err != nil {
		return nil, err
	}
	if _, err := hexDigest(r.Digest); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout())
	defer cancel()
	var c *Chart
	var err error
	if IsOCI(r.Repo) {
		c, err = fetchOCI(ctx, r, opts)
	} else {
		c, err = fetchHTTP(ctx, r, opts)
	}
	if err != nil {
		return nil, err
	}
	if err := Verify(r.Digest, c.TarGz, c.OCIManifest); err != nil {
		return nil, err
	}
	return c, nil
}

// Pull resolves ref and fetches what it resolved to.
func Pull(ctx context.Context, ref Ref, opts Options) (*Chart, error) {
	r, err := Resolve(ctx, ref, opts)
	if err != nil {
		return nil, err
	}
	return Fetch(ctx, r, opts)
}

// Verify checks that tgz is the chart digest names: its sha256 for a Helm
// repository (ociManifest nil), or for OCI, ociManifest's sha256 is digest
// and its chart layer is tgz.
func Verify(digest string, tgz, ociManifest []byte) error {
	if ociManifest == nil {
		if got := Digest(tgz); got != digest {
			return fmt.Errorf("%w: chart is %s, approved %s", ErrDigestMismatch, got, digest)
		}
		return nil
	}
	if got := Digest(ociManifest); got != digest {
		return fmt.Errorf("%w: manifest is %s, approved %s", ErrDigestMismatch, got, digest)
	}
	layer, err := chartLayer(ociManifest)
	if err != nil {
		return err
	}
	if got := Digest(tgz); got != layer.Digest.String() {
		return fmt.Errorf("%w: chart layer is %s, the manifest names %s", ErrDigestMismatch, got, layer.Digest)
	}
	return nil
}

// Digest is "sha256:<hex>" of b.
func Digest(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func hexDigest(d string) (string, error) {
	h, ok := strings.CutPrefix(d, "sha256:")
	if !ok || len(h) != 64 {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex>", d)
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("digest %q is not sha256:<64 hex>", d)
	}
	return h, nil
}

// checkRef refuses what no repository request should carry.
func checkRef(ref Ref) error {
	u, err := url.Parse(ref.Repo)
	if err != nil {
		return fmt.Errorf("chart repository URL: %v", redactErr(err))
	}
	if u.Scheme != "https" && u.Scheme != "oci" {
		return fmt.Errorf("chart repository %q: only https:// and oci:// are allowed", u.Redacted())
	}
	if u.User != nil {
		return fmt.Errorf("chart repository %q: credentials belong in the Repository's Secret, not the URL", u.Redacted())
	}
	if u.Host == "" {
		return fmt.Errorf("chart repository %q has no host", ref.Repo)
	}
	if ref.Name == "" || strings.ContainsAny(ref.Name, "/\\:@ ") || strings.Contains(ref.Name, "..") {
		return fmt.Errorf("chart name %q is not a chart name", ref.Name)
	}
	if ref.Version == "" {
		return errors.New("chart version is empty")
	}
	return nil
}

// readLimited reads r up to max bytes; more is ErrTooLarge (never more
// than max+1 bytes are held).
func readLimited(r io.Reader, max int64, what string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: %w of %d bytes", what, ErrTooLarge, max)
	}
	return b, nil
}

// redactErr drops a URL's user info from err's text.
func redactErr(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil {
			ue.URL = u.Redacted()
		}
	}
	return err.Error()
}
