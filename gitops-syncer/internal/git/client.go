// Package git is the syncer's access to infra repositories: a cheap remote
// head check (ls-remote), an incremental fetch into a bare cache per
// repository, and read-only views of commits (input tree hashes, authors,
// an fs.FS of a commit's tree) for change detection and artifacts.
//
// Every operation runs under a timeout, and every error is an *Error whose
// message is free of credentials and URL user info.
package git

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/plumbing/transport/client"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// DefaultTimeout bounds a git operation when the Remote sets none.
const DefaultTimeout = 60 * time.Second

// Remote is one repository to read: a cache key (namespace/name of the
// Repository), its URL and credentials.
type Remote struct {
	// Key names the local cache; one per Repository object.
	Key string
	// URL of the remote.
	URL string
	// Auth is nil for anonymous access.
	Auth *Auth
	// Timeout bounds each operation; zero means DefaultTimeout.
	Timeout time.Duration
}

// Client is the git access the controller needs. Ref names are full
// ("refs/heads/main", "refs/tags/v1", "refs/pull/7/head").
type Client interface {
	// Head asks the remote which commit ref points at, without fetching.
	Head(ctx context.Context, r Remote, ref string) (string, error)
	// Fetch makes sure want (a commit of ref) is in the local cache,
	// fetching ref incrementally only when it is not, and returns the cache.
	// An empty want fetches ref and returns the cache.
	Fetch(ctx context.Context, r Remote, ref, want string) (*Repo, error)
	// Open returns the local cache of r without touching the network.
	Open(r Remote) (*Repo, error)
}

// Observer records the duration and result of git operations (metrics).
type Observer interface {
	// ObserveGit is called once per network operation: op is "ls-remote",
	// "fetch" or "push" (a revert branch), result "success" or the failure Reason.
	ObserveGit(op string, d time.Duration, result string)
}

// Stats counts the network operations of a GoGit client.
type Stats struct {
	LsRemotes int64
	Fetches   int64
}

// GoGit is the Client built on go-git, caching bare repositories under Dir.
type GoGit struct {
	dir      string
	policy   URLPolicy
	observer Observer

	mu     sync.Mutex
	caches map[string]*cache

	lsRemotes atomic.Int64
	fetches   atomic.Int64

	// refLists are the ref lists Head kept for the Fetch that follows
	// it, by cache id (see refmemo.go).
	refMu    sync.Mutex
	refLists map[string]*refList
}

// cache is one bare repository; mu serialises writes (fetch) against reads.
type cache struct {
	mu   sync.RWMutex
	repo *gogit.Repository
	url  string
}

var installGuardedHTTP sync.Once

// NewGoGit returns a client caching repositories under dir. It installs, once
// per process, HTTP(S) transports whose dialer refuses link-local and
// metadata addresses, so a DNS answer that changes after the URL check is
// refused too.
func NewGoGit(dir string, policy URLPolicy, observer Observer) (*GoGit, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create git cache folder: %w", err)
	}
	installGuardedHTTP.Do(func() {
		dialer := &net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second, Control: refuseForbiddenAddr}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.DialContext = dialer.DialContext
		tr.Proxy = nil
		c := githttp.NewClient(&http.Client{Transport: refListTransport{base: tr}})
		client.InstallProtocol("http", c)
		client.InstallProtocol("https", c)
	})
	return &GoGit{dir: dir, policy: policy, observer: observer, caches: map[string]*cache{}}, nil
}

// refuseForbiddenAddr is a net.Dialer Control hook refusing link-local and
// metadata addresses at connect time.
func refuseForbiddenAddr(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip := net.ParseIP(host); ip != nil {
		if a, ok := netipFromIP(ip); ok && forbiddenAddr(a) {
			return errors.New("connection to a link-local or metadata address refused")
		}
	}
	return nil
}

// Stats returns the network operations done so far.
func (g *GoGit) Stats() Stats {
	return Stats{LsRemotes: g.lsRemotes.Load(), Fetches: g.fetches.Load()}
}

func timeoutOf(r Remote) time.Duration {
	if r.Timeout > 0 {
		return r.Timeout
	}
	return DefaultTimeout
}

func (g *GoGit) observe(op string, start time.Time, err error) {
	if g.observer == nil {
		return
	}
	result := "success"
	if err != nil {
		result = string(ReasonOf(err))
		if result == "" {
			result = "error"
		}
	}
	g.observer.ObserveGit(op, time.Since(start), result)
}

// Head implements Client with one ls-remote.
func (g *GoGit) Head(ctx context.Context, r Remote, ref string) (sha string, err error) {
	ep, err := g.policy.Check(ctx, r.URL)
	if err != nil {
		return "", err
	}
	auth, err := r.Auth.authMethod(ep, filepath.Join(g.dir, ".ssh"))
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, timeoutOf(r))
	defer cancel()
	g.lsRemotes.Add(1)
	start := time.Now()
	defer func() { g.observe("ls-remote", start, err) }()
	capture := &refCapture{record: true}
	ctx = withRefCapture(ctx, capture)
	defer func() {
		if err == nil {
			g.keepRefList(r, capture, ref, sha)
		}
	}()

	rem := gogit.NewRemote(memory.NewStorage(), &config.RemoteConfig{Name: "origin", URLs: []string{r.URL}})
	refs, err := rem.ListContext(ctx, &gogit.ListOptions{Auth: auth, PeelingOption: gogit.AppendPeeled})
	if err != nil {
		if errors.Is(err, transport.ErrEmptyRemoteRepository) {
			return "", &Error{Reason: ReasonRefNotFound, Message: fmt.Sprintf("%s not found on %s: the repository has no branches or tags", ref, RedactURL(r.URL))}
		}
		return "", wrapError(ctx, "list remote refs of", r.URL, err, r.Auth.secrets())
	}
	var direct, peeled string
	for _, rf := range refs {
		switch rf.Name().String() {
		case ref:
			direct = rf.Hash().String()
		case ref + "^{}":
			peeled = rf.Hash().String()
		}
	}
	if peeled != "" {
		return peeled, nil
	}
	if direct == "" {
		return "", &Error{Reason: ReasonRefNotFound, Message: fmt.Sprintf("%s not found on %s (deleted or never pushed?)", ref, RedactURL(r.URL))}
	}
	return direct, nil
}

// keepRefList keeps the ref list Head read when the Fetch of sha will
// need the network (sha is not in the local cache yet): that Fetch then
// uses it instead of listing the refs again.
func (g *GoGit) keepRefList(r Remote, capture *refCapture, ref, sha string) {
	l := capture.kept()
	if l == nil {
		return
	}
	if c, err := g.cacheFor(r, false); err == nil && (&Repo{c: c}).HasCommit(sha) {
		return
	}
	l.ref, l.sha = ref, sha
	g.rememberRefList(cacheID(r), l)
}

// cacheID names the local cache of r.
func cacheID(r Remote) string {
	sum := sha256.Sum256([]byte(r.Key + "\x00" + r.URL))
	return hex.EncodeToString(sum[:12])
}

// cacheFor opens (or creates) the bare cache of r.
func (g *GoGit) cacheFor(r Remote, create bool) (*cache, error) {
	id := cacheID(r)
	g.mu.Lock()
	defer g.mu.Unlock()
	path := filepath.Join(g.dir, id+".git")
	if c, ok := g.caches[id]; ok {
		// A cache folder removed under us (a lost volume) is rebuilt.
		if _, err := os.Stat(filepath.Join(path, "HEAD")); err == nil {
			return c, nil
		}
		delete(g.caches, id)
	}
	if err := os.MkdirAll(g.dir, 0o700); err != nil {
		return nil, fmt.Errorf("create git cache folder: %w", err)
	}
	repo, err := gogit.PlainOpen(path)
	if errors.Is(err, gogit.ErrRepositoryNotExists) {
		if !create {
			return nil, &Error{Reason: ReasonNotFound, Message: "no local copy of the repository yet"}
		}
		repo, err = gogit.PlainInit(path, true)
		if err == nil {
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.URL}})
		}
	}
	if err != nil {
		return nil, fmt.Errorf("open git cache: %w", err)
	}
	c := &cache{repo: repo, url: r.URL}
	g.caches[id] = c
	return c, nil
}

// Open implements Client.
func (g *GoGit) Open(r Remote) (*Repo, error) {
	c, err := g.cacheFor(r, false)
	if err != nil {
		return nil, err
	}
	return &Repo{c: c}, nil
}

// Fetch implements Client: nothing goes over the network when want is
// already cached; otherwise only ref is fetched, negotiating from what the
// cache holds.
func (g *GoGit) Fetch(ctx context.Context, r Remote, ref, want string) (*Repo, error) {
	// The ref list Head kept, when it shows ref at want, stands in for
	// the one go-git would ask for (one list per sync).
	if l := g.takeRefList(cacheID(r), ref, want); l != nil && want != "" {
		ctx = withRefCapture(ctx, &refCapture{replay: l})
	}
	if want != "" {
		if c, err := g.cacheFor(r, false); err == nil {
			repo := &Repo{c: c}
			if repo.HasCommit(want) {
				return repo, nil
			}
		}
	}
	ep, err := g.policy.Check(ctx, r.URL)
	if err != nil {
		return nil, err
	}
	auth, err := r.Auth.authMethod(ep, filepath.Join(g.dir, ".ssh"))
	if err != nil {
		return nil, err
	}
	c, err := g.cacheFor(r, true)
	if err != nil {
		return nil, err
	}
	repo := &Repo{c: c}
	if err := g.fetch(ctx, r, c, auth, ref); err != nil {
		return nil, err
	}
	if want != "" && !repo.HasCommit(want) {
		return nil, &Error{Reason: ReasonRefNotFound, Message: fmt.Sprintf("commit %s is no longer on %s of %s", sluicev1.ShortSHA(want), ref, RedactURL(r.URL))}
	}
	return repo, nil
}

func (g *GoGit) fetch(ctx context.Context, r Remote, c *cache, auth transport.AuthMethod, ref string) (err error) {
	ctx, cancel := context.WithTimeout(ctx, timeoutOf(r))
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	g.fetches.Add(1)
	start := time.Now()
	defer func() { g.observe("fetch", start, err) }()

	spec := config.RefSpec("+" + ref + ":" + ref)
	if err := spec.Validate(); err != nil {
		return &Error{Reason: ReasonURL, Message: fmt.Sprintf("invalid ref %q", ref)}
	}
	err = c.repo.FetchContext(ctx, &gogit.FetchOptions{
		RemoteName: "origin",
		RemoteURL:  r.URL,
		RefSpecs:   []config.RefSpec{spec},
		Auth:       auth,
		Tags:       gogit.NoTags,
		Force:      true,
	})
	if err == nil || errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		return nil
	}
	if errors.Is(err, gogit.NoMatchingRefSpecError{}) {
		return &Error{Reason: ReasonRefNotFound, Message: fmt.Sprintf("fetch %s: %s not found", RedactURL(r.URL), ref)}
	}
	return wrapError(ctx, "fetch", r.URL, err, r.Auth.secrets())
}

// ResolveRef returns the commit a local ref of the cache points at.
func (r *Repo) ResolveRef(ref string) (string, error) {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	h, err := r.c.repo.ResolveRevision(plumbing.Revision(ref + "^{commit}"))
	if err != nil {
		return "", &Error{Reason: ReasonRefNotFound, Message: fmt.Sprintf("%s is not in the local cache", ref)}
	}
	return h.String(), nil
}

func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}
