// Package artifact downloads a ChangeRequest's artifact from the configured
// artifact server, verifies it against the digests the change was approved
// for, and extracts it into a private folder with every entry confined to
// it. The Helm and Terraform appliers share it.
//
// The order is fixed so that nothing unverified is ever extracted: download
// (size-capped) into a private temporary file while hashing the .tar.gz;
// compare with spec.artifact.sha256; decompress once (bomb-capped) hashing
// the tar; compare with spec.contentDigest; recompute approvalDigest from the
// verified content digest and the recorded manifest and plan digests; only
// then extract.
package artifact

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// Fetcher downloads and verifies artifacts. It is safe for concurrent use.
type Fetcher struct {
	// BaseURL is the artifact server's base; an artifact URL must lie
	// under it (same scheme, host and port, a path below the base path).
	BaseURL *url.URL
	// Client does the download; nil means a client with a 2-minute timeout.
	// Redirects are followed only while they stay under BaseURL.
	Client *http.Client
	// Limits bound the archive; zero fields take DefaultLimits.
	Limits Limits
	// TempDir is where private folders are made; empty means os.TempDir().
	TempDir string
	// Token returns the bearer token the artifact server requires; it is
	// called for every download and sent only to BaseURL's server. Nil
	// sends no credential.
	Token func() ([]byte, error)
}

// Option configures a Fetcher made by NewFetcher.
type Option func(*Fetcher)

// WithTokenFile makes the Fetcher present the bearer token held in path
// (surrounding white space ignored), read at every download so a rotated
// Secret takes effect without a restart. An empty path sends no token.
func WithTokenFile(path string) Option {
	return func(f *Fetcher) {
		if path == "" {
			return
		}
		f.Token = func() ([]byte, error) {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("read the artifact token: %w", err)
			}
			if b = bytes.TrimSpace(b); len(b) == 0 {
				return nil, fmt.Errorf("the artifact token file %s is empty", path)
			}
			return b, nil
		}
	}
}

// NewFetcher returns a Fetcher for the artifact server at base.
func NewFetcher(base string, opts ...Option) (*Fetcher, error) {
	u, err := url.Parse(base)
	if err != nil {
		return nil, fmt.Errorf("artifact base URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("artifact base URL must be http(s)://host[:port][/path] without credentials, query or fragment")
	}
	f := &Fetcher{BaseURL: u}
	for _, o := range opts {
		o(f)
	}
	return f, nil
}

// Content is a verified, extracted artifact. Close removes it.
type Content struct {
	// Dir is the private folder holding the artifact's files, laid out as
	// in the repository (paths relative to the repository root).
	Dir string
	// ContentDigest is the verified digest of the uncompressed tar.
	ContentDigest sluicev1.Digest
	// ArchiveSHA256 is the verified digest of the .tar.gz.
	ArchiveSHA256 sluicev1.Digest
	// ArchiveBytes is the size of the .tar.gz.
	ArchiveBytes int64

	parent string
}

// Close removes the extracted files.
func (c *Content) Close() error {
	if c == nil || c.parent == "" {
		return nil
	}
	err := os.RemoveAll(c.parent)
	c.parent = ""
	return err
}

// FetchChange downloads the artifact of an approved change, verifies the
// archive digest, the content digest and the approvalDigest, and extracts
// it. A verification failure is a permanent applier failure with reason
// DigestMismatch (URLNotAllowed for an artifact outside the base URL); an
// unsafe archive fails with reason ApplyFailed; a download problem is
// returned as is, for a retry.
func (f *Fetcher) FetchChange(ctx context.Context, cr *sluicev1.ChangeRequest) (*Content, error) {
	if cr == nil {
		return nil, errors.New("no change to fetch")
	}
	content, err := f.Fetch(ctx, cr.Spec.Artifact.URL, cr.Spec.Artifact.SHA256, cr.Spec.ContentDigest)
	if err != nil {
		return nil, err
	}
	// Everything the approval covers: the verified content, the recorded
	// digests, the verification and the rollback (as the gate checks it).
	want := sluicev1.ComputeRollbackApprovalDigest(cr.Namespace, cr.Spec.Release, cr.Spec.Operation, content.ContentDigest, cr.Spec.ManifestDigest,
		cr.Spec.PlanDigest, sluicev1.VerificationDigest(cr.Spec.Verification), cr.Spec.Rollback)
	if want != cr.Spec.ApprovalDigest {
		_ = content.Close()
		return nil, applier.Permanent(sluicev1.ReasonDigestMismatch,
			"approvalDigest %s does not match %s recomputed from the verified content and the recorded digests", cr.Spec.ApprovalDigest, want)
	}
	return content, nil
}

// Fetch downloads rawURL, checks the .tar.gz against archiveSHA256 and the
// uncompressed tar against contentDigest, and extracts it. See FetchChange
// for the errors.
func (f *Fetcher) Fetch(ctx context.Context, rawURL string, archiveSHA256, contentDigest sluicev1.Digest) (*Content, error) {
	if !sluicev1.ValidDigest(string(archiveSHA256)) || !sluicev1.ValidDigest(string(contentDigest)) {
		return nil, applier.Permanent(sluicev1.ReasonDigestMismatch, "the change records no valid artifact and content digests")
	}
	u, err := f.allowed(rawURL)
	if err != nil {
		return nil, err
	}
	limits := f.Limits.withDefaults()
	parent, err := os.MkdirTemp(f.TempDir, "sluice-artifact-")
	if err != nil {
		return nil, fmt.Errorf("make private artifact folder: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = os.RemoveAll(parent)
		}
	}()

	archive := parent + "/artifact.tar.gz"
	size, gotArchive, err := f.download(ctx, u, archive, limits.MaxArchiveBytes)
	if err != nil {
		return nil, err
	}
	if gotArchive != archiveSHA256 {
		return nil, applier.Permanent(sluicev1.ReasonDigestMismatch,
			"artifact %s has sha256 %s, the change records %s", redact(u), gotArchive, archiveSHA256)
	}
	gotContent, err := contentDigestOf(archive, limits)
	if err != nil {
		return nil, err
	}
	if gotContent != contentDigest {
		return nil, applier.Permanent(sluicev1.ReasonDigestMismatch,
			"artifact %s holds content %s, the change records contentDigest %s", redact(u), gotContent, contentDigest)
	}

	dir := parent + "/content"
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("make private artifact folder: %w", err)
	}
	af, err := os.Open(archive)
	if err != nil {
		return nil, fmt.Errorf("reopen artifact: %w", err)
	}
	err = ExtractTarGz(af, dir, limits)
	_ = af.Close()
	if err != nil {
		var unsafe *UnsafeArchiveError
		if errors.As(err, &unsafe) {
			return nil, &applier.Failure{Reason: sluicev1.ReasonApplyFailed, Message: "the artifact was refused", Err: err}
		}
		return nil, fmt.Errorf("extract artifact: %w", err)
	}
	if err := os.Remove(archive); err != nil {
		return nil, fmt.Errorf("remove downloaded archive: %w", err)
	}
	ok = true
	return &Content{Dir: dir, ContentDigest: gotContent, ArchiveSHA256: gotArchive, ArchiveBytes: size, parent: parent}, nil
}

// allowed parses rawURL and checks it lies under the base URL.
func (f *Fetcher) allowed(rawURL string) (*url.URL, error) {
	if f.BaseURL == nil {
		return nil, errors.New("artifact fetcher has no base URL configured")
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, applier.Permanent(sluicev1.ReasonURLNotAllowed, "artifact URL does not parse")
	}
	if !underBase(f.BaseURL, u) {
		return nil, applier.Permanent(sluicev1.ReasonURLNotAllowed, "artifact URL %s is outside the configured artifact server", redact(u))
	}
	return u, nil
}

// underBase reports whether u names something below base: the same scheme and host
// (port included), no credentials, and a clean path under the base path.
func underBase(base, u *url.URL) bool {
	if u == nil || !strings.EqualFold(u.Scheme, base.Scheme) || !strings.EqualFold(u.Host, base.Host) || u.User != nil || u.Opaque != "" {
		return false
	}
	p := u.EscapedPath()
	raw := u.Path
	if raw == "" || strings.Contains(raw, "\\") || path.Clean(raw) != raw && path.Clean(raw)+"/" != raw {
		return false // ".", "..", "//" and friends.
	}
	for _, seg := range strings.Split(strings.ToLower(p), "/") {
		if seg == "%2e%2e" || seg == ".%2e" || seg == "%2e." || strings.Contains(seg, "%2f") {
			return false
		}
	}
	bp := strings.TrimSuffix(base.Path, "/") + "/"
	return len(raw) > len(bp) && strings.HasPrefix(raw, bp)
}

// download streams u into file, capped at max bytes, and returns its size
// and sha256.
func (f *Fetcher) download(ctx context.Context, u *url.URL, file string, max int64) (int64, sluicev1.Digest, error) {
	client := f.httpClient()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, "", fmt.Errorf("build artifact request: %w", err)
	}
	if f.Token != nil {
		tok, err := f.Token()
		if err != nil {
			return 0, "", err
		}
		req.Header.Set("Authorization", "Bearer "+string(tok))
	}
	resp, err := client.Do(req)
	if err != nil {
		var pf *applier.Failure
		if errors.As(err, &pf) {
			return 0, "", pf // a redirect out of the artifact server.
		}
		return 0, "", fmt.Errorf("download artifact %s: %w", redact(u), scrub(err))
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode == http.StatusUnauthorized {
		// A configuration problem, retried so a rotated token heals it.
		return 0, "", fmt.Errorf("download artifact %s: HTTP 401: the artifact server refused this operator's credential (--artifact-token-file must hold the syncer's artifact token)", redact(u))
	}
	if resp.StatusCode != http.StatusOK {
		return 0, "", fmt.Errorf("download artifact %s: HTTP %d", redact(u), resp.StatusCode)
	}
	if resp.ContentLength > max {
		return 0, "", &applier.Failure{Reason: sluicev1.ReasonApplyFailed, Message: "the artifact was refused",
			Err: &UnsafeArchiveError{Problem: fmt.Sprintf("archive of %d bytes is over the %d-byte limit", resp.ContentLength, max)}}
	}
	out, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, "", fmt.Errorf("create artifact file: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), &limitedReader{r: resp.Body, n: max})
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if errors.Is(err, errTooBig) {
			return 0, "", &applier.Failure{Reason: sluicev1.ReasonApplyFailed, Message: "the artifact was refused",
				Err: &UnsafeArchiveError{Problem: fmt.Sprintf("archive over the %d-byte limit", max)}}
		}
		return 0, "", fmt.Errorf("download artifact %s: %w", redact(u), scrub(err))
	}
	return n, sluicev1.Digest("sha256:" + hex.EncodeToString(h.Sum(nil))), nil
}

func (f *Fetcher) httpClient() *http.Client {
	base := f.Client
	if base == nil {
		base = &http.Client{Timeout: 2 * time.Minute}
	}
	c := *base
	c.CheckRedirect = func(req *http.Request, via []*http.Request) error {
		if len(via) >= 5 {
			return errors.New("too many redirects")
		}
		if !underBase(f.BaseURL, req.URL) {
			return applier.Permanent(sluicev1.ReasonURLNotAllowed, "artifact server redirected outside itself to %s", redact(req.URL))
		}
		return nil
	}
	return &c
}

// contentDigestOf decompresses the archive once, bomb-capped, and returns
// the sha256 of the uncompressed stream.
func contentDigestOf(archive string, limits Limits) (sluicev1.Digest, error) {
	af, err := os.Open(archive)
	if err != nil {
		return "", fmt.Errorf("reopen artifact: %w", err)
	}
	defer func() { _ = af.Close() }()
	refused := func(problem string) error {
		return &applier.Failure{Reason: sluicev1.ReasonDigestMismatch, Message: "the artifact is not the approved content",
			Err: &UnsafeArchiveError{Problem: problem}}
	}
	zr, err := gzip.NewReader(af)
	if err != nil {
		return "", refused(fmt.Sprintf("not a gzip stream: %v", err))
	}
	h := sha256.New()
	if _, err := io.Copy(h, &limitedReader{r: zr, n: limits.MaxUncompressedBytes}); err != nil {
		if errors.Is(err, errTooBig) {
			return "", &applier.Failure{Reason: sluicev1.ReasonApplyFailed, Message: "the artifact was refused",
				Err: &UnsafeArchiveError{Problem: fmt.Sprintf("more than %d bytes uncompressed", limits.MaxUncompressedBytes)}}
		}
		return "", refused(fmt.Sprintf("bad gzip stream: %v", err))
	}
	return sluicev1.Digest("sha256:" + hex.EncodeToString(h.Sum(nil))), nil
}

// redact drops credentials and the query from a URL for messages.
func redact(u *url.URL) string {
	if u == nil {
		return ""
	}
	c := *u
	c.User = nil
	c.RawQuery = ""
	c.Fragment = ""
	return c.String()
}

// scrub drops the full URL (which might carry a query) from a transport
// error; the caller names the redacted URL.
func scrub(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}
