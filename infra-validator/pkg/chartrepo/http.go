package chartrepo

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"helm.sh/helm/v3/pkg/repo"
)

// resolveHTTP reads the repository's index.yaml (bounded while it
// streams) and picks the version with Helm's own index lookup (exact or
// the highest in a semver range).
func resolveHTTP(ctx context.Context, ref Ref, opts Options) (*Resolved, error) {
	base := strings.TrimSuffix(ref.Repo, "/")
	data, err := get(ctx, base+"/index.yaml", opts, opts.maxIndex(), "index.yaml", true)
	if err != nil {
		return nil, err
	}
	idx, err := loadIndex(data)
	if err != nil {
		return nil, err
	}
	if _, ok := idx.Entries[ref.Name]; !ok {
		return nil, fmt.Errorf("chart %s: %w (index.yaml of %s)", ref.Name, ErrNotFound, ref.Repo)
	}
	cv, err := idx.Get(ref.Name, ref.Version)
	if err != nil {
		return nil, fmt.Errorf("chart %s %s in %s: %w", ref.Name, ref.Version, ref.Repo, ErrNoMatch)
	}
	if len(cv.URLs) == 0 {
		return nil, fmt.Errorf("chart %s %s in %s: the index gives no URL", ref.Name, cv.Version, ref.Repo)
	}
	u, err := repo.ResolveReferenceURL(base+"/", cv.URLs[0])
	if err != nil {
		return nil, fmt.Errorf("chart %s %s: URL %q: %v", ref.Name, cv.Version, cv.URLs[0], err)
	}
	if pu, err := url.Parse(u); err != nil || pu.Scheme != "https" || pu.User != nil {
		return nil, fmt.Errorf("chart %s %s: the index's URL must be https:// without credentials", ref.Name, cv.Version)
	}
	r := &Resolved{Repo: ref.Repo, Name: ref.Name, Version: cv.Version, URL: u}
	if cv.Digest != "" {
		if _, err := hexDigest("sha256:" + cv.Digest); err != nil {
			return nil, fmt.Errorf("chart %s %s: the index's digest %q is not a sha256", ref.Name, cv.Version, cv.Digest)
		}
		r.Digest = "sha256:" + cv.Digest
		return r, nil
	}
	// An index without digests: the digest is that of the bytes served now.
	tgz, err := get(ctx, u, opts, opts.maxChart(), "chart "+ref.Name+" "+cv.Version, sameHost(u, ref.Repo))
	if err != nil {
		return nil, err
	}
	r.Digest = Digest(tgz)
	return r, nil
}

// fetchHTTP downloads the .tgz r names.
func fetchHTTP(ctx context.Context, r *Resolved, opts Options) (*Chart, error) {
	u := r.URL
	if u == "" {
		// Resolved from a Release's record: find the URL in the index again.
		again, err := resolveHTTP(ctx, Ref{Repo: r.Repo, Name: r.Name, Version: r.Version}, opts)
		if err != nil {
			return nil, err
		}
		u = again.URL
	}
	tgz, err := get(ctx, u, opts, opts.maxChart(), "chart "+r.Name+" "+r.Version, sameHost(u, r.Repo))
	if err != nil {
		return nil, err
	}
	return &Chart{Resolved: *r, TarGz: tgz}, nil
}

// get makes one bounded GET, with the credentials when withCreds.
func get(ctx context.Context, u string, opts Options, max int64, what string, withCreds bool) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", what, redactErr(err))
	}
	if c := opts.Credentials; c != nil && withCreds {
		req.SetBasicAuth(c.Username, c.Password)
	}
	resp, err := opts.httpClient().Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return nil, fmt.Errorf("%s: the repository did not answer within %s: %w", what, opts.timeout(), context.DeadlineExceeded)
		}
		if errors.Is(err, ErrForbiddenAddress) {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return nil, fmt.Errorf("%s: %v", what, redactErr(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("%s: %w (HTTP %d)", what, ErrUnauthorized, resp.StatusCode)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%s: %w (HTTP 404)", what, ErrNotFound)
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("%s: HTTP %d", what, resp.StatusCode)
	}
	if resp.ContentLength > max {
		return nil, fmt.Errorf("%s: %w of %d bytes (it has %d)", what, ErrTooLarge, max, resp.ContentLength)
	}
	b, err := readLimited(resp.Body, max, what)
	if err != nil && isTimeout(err) {
		return nil, fmt.Errorf("%s: the repository did not finish within %s: %w", what, opts.timeout(), context.DeadlineExceeded)
	}
	return b, err
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout() || errors.Is(err, context.DeadlineExceeded)
}

// sameHost reports whether u is on repo's host (credentials go there only,
// as Flux's HelmRepository without passCredentials).
func sameHost(u, repoURL string) bool {
	a, err1 := url.Parse(u)
	b, err2 := url.Parse(repoURL)
	return err1 == nil && err2 == nil && a.Host == b.Host
}

// loadIndex parses an index with Helm's loader (which sorts versions and
// drops invalid entries); it reads files only, so the bounded bytes go
// through a private temporary file.
func loadIndex(data []byte) (*repo.IndexFile, error) {
	dir, err := os.MkdirTemp("", "sluice-index-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "index.yaml")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		return nil, err
	}
	idx, err := repo.LoadIndexFile(p)
	if err != nil {
		return nil, fmt.Errorf("index.yaml: %v", strings.ReplaceAll(err.Error(), p, "index.yaml"))
	}
	return idx, nil
}
