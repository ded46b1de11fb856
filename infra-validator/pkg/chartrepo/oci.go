package chartrepo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"

	"github.com/Masterminds/semver/v3"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"helm.sh/helm/v3/pkg/registry"
	"oras.land/oras-go/v2/errdef"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
	"oras.land/oras-go/v2/registry/remote/errcode"
)

// ociRepository is the registry repository of chart name under an oci://
// repository URL, authenticated with the Options' credentials.
func ociRepository(repoURL, name string, opts Options) (*remote.Repository, error) {
	ref := strings.TrimSuffix(strings.TrimPrefix(repoURL, "oci://"), "/") + "/" + name
	r, err := remote.NewRepository(ref)
	if err != nil {
		return nil, fmt.Errorf("chart repository %s: %v", repoURL, err)
	}
	client := &auth.Client{Client: opts.httpClient(), Cache: opts.Session.authCache()}
	if c := opts.Credentials; c != nil {
		client.Credential = auth.StaticCredential(r.Reference.Registry, auth.Credential{Username: c.Username, Password: c.Password})
	}
	r.Client = client
	return r, nil
}

// Session keeps what registries told one set of credentials (their auth
// challenge and token), so later requests skip the challenge. One Session
// belongs to one set of credentials: never share it between them.
type Session struct {
	once  sync.Once
	cache auth.Cache
}

// NewSession returns an empty Session.
func NewSession() *Session { return &Session{} }

func (s *Session) authCache() auth.Cache {
	if s == nil {
		return auth.NewCache()
	}
	s.once.Do(func() { s.cache = auth.NewCache() })
	return s.cache
}

// resolveOCI picks the tag (the exact version, or the highest tag in the
// range) and resolves it to its manifest digest.
func resolveOCI(ctx context.Context, ref Ref, opts Options) (*Resolved, error) {
	r, err := ociRepository(ref.Repo, ref.Name, opts)
	if err != nil {
		return nil, err
	}
	version := ref.Version
	if _, err := semver.StrictNewVersion(version); err != nil {
		if version, err = highestTag(ctx, r, ref, opts); err != nil {
			return nil, err
		}
	}
	if k := opts.Known; k != nil && k.Digest != "" && k.Repo == ref.Repo && k.Name == ref.Name && k.Version == version && version != ref.Version {
		known := *k
		return &known, nil
	}
	tag := strings.ReplaceAll(version, "+", "_")
	desc, err := r.Resolve(ctx, tag)
	if err != nil {
		err = ociErr(fmt.Sprintf("chart %s %s in %s", ref.Name, version, ref.Repo), err, opts)
		if version != ref.Version && errors.Is(err, ErrNotFound) {
			// Picked from the tag list a moment ago.
			return nil, fmt.Errorf("chart %s %s in %s: %w", ref.Name, version, ref.Repo, ErrTagNotReady)
		}
		return nil, err
	}
	return &Resolved{Repo: ref.Repo, Name: ref.Name, Version: version, Digest: desc.Digest.String()}, nil
}

// highestTag lists the repository's tags and returns the highest semver
// one in ref's range.
func highestTag(ctx context.Context, r *remote.Repository, ref Ref, opts Options) (string, error) {
	c, err := semver.NewConstraint(ref.Version)
	if err != nil {
		return "", fmt.Errorf("chart %s version %q is neither a version nor a semver range: %v", ref.Name, ref.Version, err)
	}
	var versions []*semver.Version
	n := 0
	err = r.Tags(ctx, "", func(tags []string) error {
		for _, t := range tags {
			if n++; n > 100000 {
				return fmt.Errorf("more than 100000 tags: %w", ErrTooLarge)
			}
			if v, err := semver.StrictNewVersion(strings.ReplaceAll(t, "_", "+")); err == nil && c.Check(v) {
				versions = append(versions, v)
			}
		}
		return nil
	})
	if err != nil {
		return "", ociErr(fmt.Sprintf("chart %s tags in %s", ref.Name, ref.Repo), err, opts)
	}
	if len(versions) == 0 {
		return "", fmt.Errorf("chart %s %s in %s: %w", ref.Name, ref.Version, ref.Repo, ErrNoMatch)
	}
	sort.Sort(semver.Collection(versions))
	return versions[len(versions)-1].String(), nil
}

// fetchOCI fetches the manifest by digest and its chart layer, each
// bounded and checked against its digest as it is read.
func fetchOCI(ctx context.Context, rv *Resolved, opts Options) (*Chart, error) {
	what := fmt.Sprintf("chart %s %s in %s", rv.Name, rv.Version, rv.Repo)
	r, err := ociRepository(rv.Repo, rv.Name, opts)
	if err != nil {
		return nil, err
	}
	_, rc, err := r.FetchReference(ctx, rv.Digest)
	if err != nil {
		if errors.Is(err, ErrDigestMismatch) || strings.Contains(err.Error(), "mismatch") {
			return nil, fmt.Errorf("%s: %w: %v", what, ErrDigestMismatch, err)
		}
		return nil, ociErr(what, err, opts)
	}
	man, err := readLimited(rc, maxManifestSize, what+" manifest")
	rc.Close()
	if err != nil {
		return nil, ociErr(what, err, opts)
	}
	if got := Digest(man); got != rv.Digest {
		return nil, fmt.Errorf("%s: %w: manifest is %s, approved %s", what, ErrDigestMismatch, got, rv.Digest)
	}
	layer, err := chartLayer(man)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if layer.Size > opts.maxChart() {
		return nil, fmt.Errorf("%s: %w of %d bytes (its layer has %d)", what, ErrTooLarge, opts.maxChart(), layer.Size)
	}
	brc, err := r.Blobs().Fetch(ctx, layer)
	if err != nil {
		if strings.Contains(err.Error(), "mismatch") {
			return nil, fmt.Errorf("%s: %w: %v", what, ErrDigestMismatch, err)
		}
		return nil, ociErr(what, err, opts)
	}
	defer brc.Close()
	tgz, err := readLimited(brc, opts.maxChart(), what)
	if err != nil {
		return nil, ociErr(what, err, opts)
	}
	if got := Digest(tgz); got != layer.Digest.String() {
		return nil, fmt.Errorf("%s: %w: chart layer is %s, the manifest names %s", what, ErrDigestMismatch, got, layer.Digest)
	}
	return &Chart{Resolved: *rv, TarGz: tgz, OCIManifest: man}, nil
}

// chartLayer is the Helm chart layer of an OCI manifest.
func chartLayer(man []byte) (ocispec.Descriptor, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(man, &m); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("OCI manifest: %v", err)
	}
	var found []ocispec.Descriptor
	for _, l := range m.Layers {
		if l.MediaType == registry.ChartLayerMediaType || l.MediaType == registry.LegacyChartLayerMediaType {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		return ocispec.Descriptor{}, fmt.Errorf("OCI manifest has %d Helm chart layers, not one", len(found))
	}
	if found[0].Digest.Algorithm() != digest.SHA256 || found[0].Digest.Validate() != nil {
		return ocispec.Descriptor{}, fmt.Errorf("OCI manifest: chart layer digest %q is not a sha256", found[0].Digest)
	}
	return found[0], nil
}

// ociErr words a registry error: refused credentials, a missing tag, a
// timeout or a bound.
func ociErr(what string, err error, opts Options) error {
	var ec *errcode.ErrorResponse
	switch {
	case errors.Is(err, ErrTooLarge), errors.Is(err, ErrForbiddenAddress):
		return fmt.Errorf("%s: %w", what, err)
	case isTimeout(err):
		return fmt.Errorf("%s: the registry did not answer within %s: %w", what, opts.timeout(), context.DeadlineExceeded)
	case errors.As(err, &ec) && (ec.StatusCode == http.StatusUnauthorized || ec.StatusCode == http.StatusForbidden):
		return fmt.Errorf("%s: %w (HTTP %d)", what, ErrUnauthorized, ec.StatusCode)
	case errors.As(err, &ec) && ec.StatusCode == http.StatusNotFound, errors.Is(err, errdef.ErrNotFound):
		return fmt.Errorf("%s: %w", what, ErrNotFound)
	case strings.Contains(err.Error(), "basic credential not found") || strings.Contains(err.Error(), "401"):
		return fmt.Errorf("%s: %w", what, ErrUnauthorized)
	}
	return fmt.Errorf("%s: %v", what, redactErr(err))
}
