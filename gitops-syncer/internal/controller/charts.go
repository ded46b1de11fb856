package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing/fstest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// maxCachedCharts bounds the fetched charts kept by digest.
const maxCachedCharts = 64

// ChartCache keeps fetched charts by digest, so a re-sync whose range
// still resolves to the same digest asks the repository only for the
// index or the tag (one request for a Helm repository) and fetches
// nothing.
type ChartCache struct {
	mu     sync.Mutex
	charts map[string]*chartrepo.Chart
	order  []string
	// sessions keep registries' auth challenges per Repository, chart
	// repository and credentials, never shared between credentials.
	sessions map[string]*chartrepo.Session
	// verified holds the charts whose signature was verified, by digest
	// and the keys that verified it (verifiedKey): a re-sync of an
	// unchanged range asks the registry for no signature again.
	verified map[string]bool
	// resolved holds the last full resolution of each range, by
	// Repository, credentials and chart reference (resolutionKey), and
	// when the registry last gave its digest.
	resolved map[string]knownResolution
}

// knownResolution is a range's last resolution and when its digest was
// last asked of the registry.
type knownResolution struct {
	res *chartrepo.Resolved
	at  time.Time
}

// resolutionKey names ref resolved for repo with creds.
func resolutionKey(repo *sluicev1.Repository, creds *chartrepo.Credentials, ref chartrepo.Ref) string {
	return sessionKey(repo, ref.Repo, creds) + "\n" + ref.Name + "\n" + ref.Version
}

// known is the resolution of key whose digest was asked of the registry
// within maxAge, or nil.
func (c *ChartCache) known(key string, maxAge time.Duration, now time.Time) *chartrepo.Resolved {
	c.mu.Lock()
	defer c.mu.Unlock()
	k, ok := c.resolved[key]
	if !ok || now.Sub(k.at) >= maxAge {
		return nil
	}
	return k.res
}

// remember records res as key's resolution, asked of the registry at at.
func (c *ChartCache) remember(key string, res *chartrepo.Resolved, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.resolved == nil || len(c.resolved) >= 4*maxCachedCharts {
		c.resolved = map[string]knownResolution{}
	}
	c.resolved[key] = knownResolution{res: res, at: at}
}

// verifiedKey names a chart digest verified by the keys of v.
func verifiedKey(digest string, v *chartrepo.Verification) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%x\n", digest, v.Provider, sha256.Sum256(v.Keyring))
	for _, k := range v.PublicKeys {
		fmt.Fprintf(h, "%x\n", sha256.Sum256(k))
	}
	return hex.EncodeToString(h.Sum(nil))
}

func (c *ChartCache) isVerified(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.verified[key]
}

func (c *ChartCache) markVerified(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.verified == nil || len(c.verified) >= 4*maxCachedCharts {
		c.verified = map[string]bool{}
	}
	c.verified[key] = true
}

// sessionKey names repo's credentials creds for chartURL.
func sessionKey(repo *sluicev1.Repository, chartURL string, creds *chartrepo.Credentials) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s/%s\n%s\n", repo.Namespace, repo.Name, chartURL)
	if creds != nil {
		fmt.Fprintf(h, "%q\n%q\n", creds.Username, creds.Password)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// session is the Session of repo's credentials creds for chartURL.
func (c *ChartCache) session(repo *sluicev1.Repository, chartURL string, creds *chartrepo.Credentials) *chartrepo.Session {
	key := sessionKey(repo, chartURL, creds)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.sessions == nil {
		c.sessions = map[string]*chartrepo.Session{}
	}
	if len(c.sessions) >= 4*maxCachedCharts {
		clear(c.sessions)
	}
	s, ok := c.sessions[key]
	if !ok {
		s = chartrepo.NewSession()
		c.sessions[key] = s
	}
	return s
}

func (c *ChartCache) get(digest string) *chartrepo.Chart {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.charts[digest]
}

func (c *ChartCache) put(ch *chartrepo.Chart) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.charts == nil {
		c.charts = map[string]*chartrepo.Chart{}
	}
	if _, ok := c.charts[ch.Digest]; ok {
		return
	}
	if len(c.order) >= maxCachedCharts {
		delete(c.charts, c.order[0])
		c.order = c.order[1:]
	}
	c.charts[ch.Digest] = ch
	c.order = append(c.order, ch.Digest)
}

// chartError is a chart that cannot be had until a human changes
// something (credentials, the range, the repository): the release waits,
// the others go on, and the next poll tries again.
type chartError struct{ msg string }

func (e *chartError) Error() string { return e.msg }

// remoteChart resolves the chart of svc's environment env when it comes
// from a chart repository (nil otherwise) to one exact version and
// digest, and fetches it by that digest (or takes it from the cache).
// Where the Repository asks for a signature (spec.chartRepositories[].verify),
// the chart is returned only once it is verified: a chart with no or a
// bad signature is a chartError, so its release proposes nothing and the
// others go on.
func (r *RepositoryReconciler) remoteChart(ctx context.Context, repo *sluicev1.Repository, svc *manifest.Service, env string) (*chartrepo.Chart, error) {
	e, ok := svc.Environment(env)
	c := svc.ChartOf(env)
	if !ok || c.Repo == "" || e.Source() != manifest.SourceChart {
		return nil, nil
	}
	return r.resolveChart(ctx, repo, chartrepo.Ref{Repo: c.Repo, Name: c.Name, Version: c.Version})
}

// resolveChart resolves ref to one exact version and digest, fetches the
// chart by that digest (or takes it from the cache) and verifies its
// signature where the Repository asks for one (see remoteChart).
func (r *RepositoryReconciler) resolveChart(ctx context.Context, repo *sluicev1.Repository, ref chartrepo.Ref) (*chartrepo.Chart, error) {
	opts := r.ChartOptions
	creds, err := r.chartCredentials(ctx, repo, ref.Repo)
	if err != nil {
		return nil, err
	}
	opts.Credentials = creds
	opts.Session = r.Charts.session(repo, ref.Repo, creds)
	what := fmt.Sprintf("chart %s %s from %s", ref.Name, ref.Version, ref.Repo)
	// Within ChartDigestRecheck of asking the registry for a range's
	// digest, a re-sync whose range still picks that version takes the
	// digest it had (one request: the tag list).
	key, now := resolutionKey(repo, creds, ref), time.Now()
	if r.ChartDigestRecheck > 0 {
		opts.Known = r.Charts.known(key, r.ChartDigestRecheck, now)
	}
	resolved, err := chartrepo.Resolve(ctx, ref, opts)
	if err != nil {
		return nil, chartFailure(what, err)
	}
	if opts.Known == nil || *resolved != *opts.Known {
		r.Charts.remember(key, resolved, now)
	}
	verify, err := r.chartVerification(ctx, repo, ref.Repo)
	if err != nil {
		return nil, err
	}
	c := r.Charts.get(resolved.Digest)
	if c == nil || c.Repo != resolved.Repo || c.Name != resolved.Name || c.Version != resolved.Version {
		if c, err = chartrepo.Fetch(ctx, resolved, opts); err != nil {
			return nil, chartFailure(what, err)
		}
		if _, err := chartrepo.Load(c.TarGz, chartrepo.DefaultMaxUnpacked); err != nil {
			return nil, chartFailure(what, err)
		}
		r.Charts.put(c)
	}
	if verify != nil {
		key := verifiedKey(c.Digest, verify)
		if !r.Charts.isVerified(key) {
			if err := chartrepo.VerifySignature(ctx, c, verify, opts); err != nil {
				return nil, chartFailure(what, err)
			}
			r.Charts.markVerified(key)
		}
	}
	return c, nil
}

// chartByDigest returns the chart a change recorded (repository, name,
// exact version, digest), from the cache or fetched by its digest with the
// Repository's credentials.
func (r *RepositoryReconciler) chartByDigest(ctx context.Context, repo *sluicev1.Repository, c sluicev1.ChartSource) (*chartrepo.Chart, error) {
	if ch := r.Charts.get(string(c.Digest)); ch != nil && ch.Repo == c.Repo && ch.Name == c.Name && ch.Version == c.Version {
		return ch, nil
	}
	opts := r.ChartOptions
	creds, err := r.chartCredentials(ctx, repo, c.Repo)
	if err != nil {
		return nil, err
	}
	opts.Credentials = creds
	opts.Session = r.Charts.session(repo, c.Repo, creds)
	ch, err := chartrepo.Fetch(ctx, &chartrepo.Resolved{Repo: c.Repo, Name: c.Name, Version: c.Version, Digest: string(c.Digest)}, opts)
	if err != nil {
		return nil, chartFailure(fmt.Sprintf("chart %s %s from %s", c.Name, c.Version, c.Repo), err)
	}
	r.Charts.put(ch)
	return ch, nil
}

// chartFailure sorts a resolve or fetch error: what only a human can fix
// is a chartError, the rest (a timeout, a connection refused) is retried.
func chartFailure(what string, err error) error {
	for _, human := range []error{chartrepo.ErrUnauthorized, chartrepo.ErrNoMatch, chartrepo.ErrNotFound,
		chartrepo.ErrTooLarge, chartrepo.ErrUnsafeArchive, chartrepo.ErrDigestMismatch, chartrepo.ErrForbiddenAddress, chartrepo.ErrSignature} {
		if errors.Is(err, human) {
			return &chartError{msg: fmt.Sprintf("%s: %v", what, err)}
		}
	}
	return fmt.Errorf("%s: %w", what, err)
}

// chartRepository is the spec.chartRepositories entry that applies to
// chartURL for what has reports set: the longest URL that chartURL is or
// lies below, among the entries setting it (credentials and verification
// may come from entries of different lengths).
func chartRepository(repo *sluicev1.Repository, chartURL string, has func(*sluicev1.ChartRepository) bool) *sluicev1.ChartRepository {
	var best *sluicev1.ChartRepository
	for i := range repo.Spec.ChartRepositories {
		c := &repo.Spec.ChartRepositories[i]
		if has(c) && urlHasPrefix(chartURL, c.URL) && (best == nil || len(c.URL) > len(best.URL)) {
			best = c
		}
	}
	return best
}

// chartSecret reads the Secret name of repo's namespace for the chart
// repository entry url; a missing Secret is a chartError.
func (r *RepositoryReconciler) chartSecret(ctx context.Context, repo *sluicev1.Repository, url, name string) (*corev1.Secret, error) {
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: repo.Namespace, Name: name}
	if err := r.APIReader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &chartError{msg: fmt.Sprintf("chart repository %s: secret %q not found", url, key.Name)}
		}
		return nil, fmt.Errorf("read secret %q: %w", key.Name, err)
	}
	return secret, nil
}

// chartCredentials reads the credentials the Repository names for
// chartURL (the longest matching spec.chartRepositories URL with a
// secretRef), if any.
func (r *RepositoryReconciler) chartCredentials(ctx context.Context, repo *sluicev1.Repository, chartURL string) (*chartrepo.Credentials, error) {
	best := chartRepository(repo, chartURL, func(c *sluicev1.ChartRepository) bool { return c.SecretRef != nil && c.SecretRef.Name != "" })
	if best == nil {
		return nil, nil
	}
	secret, err := r.chartSecret(ctx, repo, best.URL, best.SecretRef.Name)
	if err != nil {
		return nil, err
	}
	user, pass := string(secret.Data["username"]), string(secret.Data["password"])
	if pass == "" {
		return nil, &chartError{msg: fmt.Sprintf("chart repository %s: secret %q has no password", best.URL, best.SecretRef.Name)}
	}
	return &chartrepo.Credentials{Username: user, Password: pass}, nil
}

// chartVerification reads the signature the Repository asks charts from
// chartURL to carry (the longest matching spec.chartRepositories URL with
// a verify) and its keys, if any. A Secret without usable keys is a
// chartError naming the Secret and key, never their content.
func (r *RepositoryReconciler) chartVerification(ctx context.Context, repo *sluicev1.Repository, chartURL string) (*chartrepo.Verification, error) {
	best := chartRepository(repo, chartURL, func(c *sluicev1.ChartRepository) bool { return c.Verify != nil })
	if best == nil {
		return nil, nil
	}
	name := best.Verify.SecretRef.Name
	secret, err := r.chartSecret(ctx, repo, best.URL, name)
	if err != nil {
		return nil, err
	}
	switch best.Verify.Provider {
	case sluicev1.ChartSignatureProvenance:
		ring := secret.Data[ChartKeyringKey]
		if len(ring) == 0 {
			return nil, &chartError{msg: fmt.Sprintf("chart repository %s: secret %q has no %q (an OpenPGP public keyring) to verify provenance with", best.URL, name, ChartKeyringKey)}
		}
		return &chartrepo.Verification{Provider: chartrepo.Provenance, Keyring: ring}, nil
	case sluicev1.ChartSignatureCosign:
		var keys [][]byte
		for _, k := range slices.Sorted(maps.Keys(secret.Data)) {
			if strings.HasSuffix(k, ".pub") && len(secret.Data[k]) > 0 {
				keys = append(keys, secret.Data[k])
			}
		}
		if len(keys) == 0 {
			return nil, &chartError{msg: fmt.Sprintf("chart repository %s: secret %q has no public key (a key ending in .pub) to verify cosign signatures with", best.URL, name)}
		}
		return &chartrepo.Verification{Provider: chartrepo.Cosign, PublicKeys: keys}, nil
	}
	return nil, &chartError{msg: fmt.Sprintf("chart repository %s: verify.provider %q must be provenance or cosign", best.URL, best.Verify.Provider)}
}

// ChartKeyringKey is the key of a verify Secret holding the OpenPGP
// public keyring provenance files are verified with.
const ChartKeyringKey = "keyring"

// urlHasPrefix reports whether u is prefix or below it (at a "/").
func urlHasPrefix(u, prefix string) bool {
	prefix = strings.TrimSuffix(prefix, "/")
	return u == prefix || strings.HasPrefix(u, prefix+"/")
}

// chartTree folds the chart's digest into a release's input hash, so a
// new chart version in the range (or a moved tag) is a change without a
// git push, and an unchanged one is not.
func chartTree(tree string, c *chartrepo.Chart) string {
	if c == nil {
		return tree
	}
	s := sha256.Sum256([]byte(tree + "\nchart:" + c.Repo + " " + c.Name + " " + c.Version + " " + c.Digest + "\n"))
	return hex.EncodeToString(s[:20])
}

// withFetched is fsys with the fetched chart's files (sources.RemoteChartDir)
// and the fetched Kustomize remote bases (under manifest.RemoteBasesDir)
// added, and the input paths with those folders; a repository holding
// either folder itself is refused, so what the content says was fetched
// always was.
func withFetched(fsys fs.FS, inputs []string, c *chartrepo.Chart, bases []fetchedBase, kcharts []fetchedKChart) (fs.FS, []string, error) {
	if c == nil && len(bases) == 0 && len(kcharts) == 0 {
		return fsys, inputs, nil
	}
	extra := fstest.MapFS{}
	inputs = append([]string{}, inputs...)
	if c != nil {
		if _, err := fs.Stat(fsys, sources.RemoteChartDir); err == nil {
			return nil, nil, fmt.Errorf("the repository holds %s, a folder Sluice keeps for fetched charts", sources.RemoteChartDir)
		}
		files, err := sources.RemoteChartFiles(c)
		if err != nil {
			return nil, nil, err
		}
		for name, data := range files {
			extra[name] = &fstest.MapFile{Data: data, Mode: 0o644}
		}
		inputs = append(inputs, sources.RemoteChartDir)
	}
	if len(bases) > 0 {
		if err := refuseRemoteBasesDir(fsys); err != nil {
			return nil, nil, err
		}
		files, roots := remoteBaseFiles(bases)
		for name, data := range files {
			extra[name] = &fstest.MapFile{Data: data, Mode: 0o644}
		}
		inputs = append(inputs, roots...)
	}
	if len(kcharts) > 0 {
		if err := refuseRemoteBasesDir(fsys); err != nil {
			return nil, nil, err
		}
		files, roots, err := kustomizeChartFiles(kcharts)
		if err != nil {
			return nil, nil, err
		}
		for name, data := range files {
			extra[name] = &fstest.MapFile{Data: data, Mode: 0o644}
		}
		inputs = append(inputs, roots...)
	}
	return overlayFS{base: fsys, extra: extra, root: strings.SplitN(sources.RemoteChartDir, "/", 2)[0]}, inputs, nil
}

// refuseRemoteBasesDir refuses a repository holding the folders Sluice
// keeps fetched Kustomize remote bases and helmCharts charts in: an
// overlay would build files the pusher wrote as if they were a pinned
// commit of another repository or a chart of an allowed repository.
func refuseRemoteBasesDir(fsys fs.FS) error {
	if _, err := fs.Stat(fsys, manifest.RemoteBasesDir); err == nil {
		return fmt.Errorf("the repository holds %s, a folder Sluice keeps for fetched remote bases", manifest.RemoteBasesDir)
	}
	if _, err := fs.Stat(fsys, manifest.KustomizeChartsDir); err == nil {
		return fmt.Errorf("the repository holds %s, a folder Sluice keeps for the charts of helmCharts", manifest.KustomizeChartsDir)
	}
	return nil
}

// overlayFS serves paths under root from extra, the rest from base.
type overlayFS struct {
	base  fs.FS
	extra fstest.MapFS
	root  string
}

func (o overlayFS) pick(name string) fs.FS {
	if name == o.root || strings.HasPrefix(name, o.root+"/") {
		return o.extra
	}
	return o.base
}

func (o overlayFS) Open(name string) (fs.File, error) { return o.pick(name).Open(name) }

func (o overlayFS) ReadLink(name string) (string, error) {
	if l, ok := o.pick(name).(fs.ReadLinkFS); ok {
		return l.ReadLink(name)
	}
	return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
}

// Stat implements fs.StatFS as the underlying FS does (the git tree's
// does not follow links).
func (o overlayFS) Stat(name string) (fs.FileInfo, error) { return fs.Stat(o.pick(name), name) }

// ReadDir implements fs.ReadDirFS; the root lists the overlay's folder too.
func (o overlayFS) ReadDir(name string) ([]fs.DirEntry, error) { return fs.ReadDir(o.pick(name), name) }

func (o overlayFS) Lstat(name string) (fs.FileInfo, error) {
	if l, ok := o.pick(name).(fs.ReadLinkFS); ok {
		return l.Lstat(name)
	}
	return fs.Stat(o.pick(name), name)
}

// chartSource records the resolved chart in a change's source: the exact
// version and the digest (the manifest's range stays on the Release).
func chartSource(src *sluicev1.ChangeSource, c *chartrepo.Chart) {
	if src == nil || c == nil {
		return
	}
	src.Chart = sluicev1.ChartSource{Repo: c.Repo, Name: c.Name, Version: c.Version, Digest: sluicev1.Digest(c.Digest)}
}

// WithFetched implements preview.ChartContent: the content of a pull
// request's preview with what its release fetches as for a change: the
// chart its service takes from a chart repository, resolved and fetched,
// the Kustomize remote bases of its overlay the Repository allows, at
// their pinned commits, and the charts of its overlay's helmCharts
// entries from repositories the Repository lists.
func (r *RepositoryReconciler) WithFetched(ctx context.Context, repo *sluicev1.Repository, svc *manifest.Service, env string, fsys fs.FS, inputs []string, remotes []manifest.RemoteBase, charts []manifest.HelmChart) (
	fs.FS, []string, *sluicev1.ChartSource, []sluicev1.ChartSource, string, error) {
	c, err := r.remoteChart(ctx, repo, svc, env)
	var ce *chartError
	switch {
	case errors.As(err, &ce):
		return nil, nil, nil, nil, ce.msg, nil
	case err != nil:
		return nil, nil, nil, nil, "", err
	}
	var bases []fetchedBase
	if len(remotes) > 0 {
		bases, err = r.remoteBases(ctx, repo, remotes)
		switch {
		case errors.As(err, &ce):
			return nil, nil, nil, nil, ce.msg, nil
		case err != nil:
			return nil, nil, nil, nil, "", err
		}
	}
	kcharts, err := r.kustomizeCharts(ctx, repo, charts)
	switch {
	case errors.As(err, &ce):
		return nil, nil, nil, nil, ce.msg, nil
	case err != nil:
		return nil, nil, nil, nil, "", err
	}
	content, in, err := withFetched(fsys, inputs, c, bases, kcharts)
	if err != nil {
		return nil, nil, nil, nil, err.Error(), nil
	}
	src := &sluicev1.ChangeSource{}
	recordKustomizeCharts(src, kcharts)
	if c == nil {
		return content, in, nil, src.HelmCharts, "", nil
	}
	return content, in, &sluicev1.ChartSource{Repo: c.Repo, Name: c.Name, Version: c.Version, Digest: sluicev1.Digest(c.Digest)}, src.HelmCharts, "", nil
}
