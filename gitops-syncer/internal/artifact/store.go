package artifact

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
)

// Key names one artifact: the release of a Repository at a revision,
// and, for a change's artifact, its sha256. One commit can give a release
// several artifacts (a chart from a chart repository re-resolved to a new
// version or a moved tag makes a second change, -r2, at the same
// commit): each is kept under its own sha256, so a later one never
// replaces the bytes an earlier change was approved on. Keys without a
// SHA256 (pull-request previews, and the changes recorded before the
// sha256 was in the key) name one artifact per release and revision.
type Key struct {
	Namespace  string
	Repository string
	Revision   string
	Release    string
	// SHA256 is the hex sha256 of the .tar.gz; empty for a key of the
	// older form.
	SHA256 string
}

var (
	dnsName   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	revision  = regexp.MustCompile(`^[a-f0-9]{40}([a-f0-9]{24})?$`)
	hexSHA256 = regexp.MustCompile(`^[a-f0-9]{64}$`)
)

// Validate refuses keys that are not Kubernetes names and a full commit
// hash, so a key can never name a path outside the store.
func (k Key) Validate() error {
	for _, s := range []string{k.Namespace, k.Repository, k.Release} {
		if !dnsName.MatchString(s) || strings.Contains(s, "..") {
			return fmt.Errorf("artifact key part %q is not a Kubernetes name", s)
		}
	}
	if !revision.MatchString(k.Revision) {
		return fmt.Errorf("artifact revision %q is not a full commit hash", k.Revision)
	}
	if k.SHA256 != "" && !hexSHA256.MatchString(k.SHA256) {
		return fmt.Errorf("artifact sha256 %q is not 64 lowercase hex digits", k.SHA256)
	}
	return nil
}

// WithDigest is k naming the artifact whose sha256 is digest
// ("sha256:<hex>", as Digest gives).
func (k Key) WithDigest(digest string) Key {
	k.SHA256 = strings.TrimPrefix(digest, "sha256:")
	return k
}

// Path is the URL path of the artifact, below the artifact base URL.
func (k Key) Path() string {
	p := "/artifacts/" + k.Namespace + "/" + k.Repository + "/" + k.Revision + "/" + k.Release
	if k.SHA256 != "" {
		p += "/" + k.SHA256
	}
	return p + ".tar.gz"
}

// URL is the download URL under base (e.g. http://gitops-syncer.sluice:9090).
func (k Key) URL(base string) string { return strings.TrimSuffix(base, "/") + k.Path() }

// ParsePath reads a Key from a URL path made by Key.Path.
func ParsePath(p string) (Key, error) {
	rest, ok := strings.CutPrefix(p, "/artifacts/")
	if !ok {
		return Key{}, errors.New("not an artifact path")
	}
	parts := strings.Split(rest, "/")
	last := len(parts) - 1
	if (len(parts) != 4 && len(parts) != 5) || !strings.HasSuffix(parts[last], ".tar.gz") {
		return Key{}, errors.New("artifact path must be /artifacts/<namespace>/<repository>/<revision>/<release>[/<sha256>].tar.gz")
	}
	parts[last] = strings.TrimSuffix(parts[last], ".tar.gz")
	k := Key{Namespace: parts[0], Repository: parts[1], Revision: parts[2], Release: parts[3]}
	if len(parts) == 5 {
		k.SHA256 = parts[4]
		if k.SHA256 == "" {
			return Key{}, errors.New("artifact path names an empty sha256")
		}
	}
	return k, k.Validate()
}

// Store keeps artifacts on disk under Dir. Losing Dir loses nothing: a
// missing artifact is rebuilt from git with the same bytes.
type Store struct {
	Dir string
}

func (s *Store) file(k Key) string {
	if k.SHA256 != "" {
		return filepath.Join(s.Dir, k.Namespace, k.Repository, k.Revision, k.Release, k.SHA256+".tar.gz")
	}
	return filepath.Join(s.Dir, k.Namespace, k.Repository, k.Revision, k.Release+".tar.gz")
}

// Put writes an artifact atomically. A key naming a sha256 takes only
// those bytes.
func (s *Store) Put(k Key, tgz []byte) error {
	if err := k.Validate(); err != nil {
		return err
	}
	if k.SHA256 != "" && Digest(tgz) != "sha256:"+k.SHA256 {
		return fmt.Errorf("store artifact %s: the bytes are %s", k.Path(), Digest(tgz))
	}
	dst := s.file(k)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("store artifact: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".tmp-*")
	if err != nil {
		return fmt.Errorf("store artifact: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(tgz); err != nil {
		tmp.Close()
		return fmt.Errorf("store artifact: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("store artifact: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("store artifact: %w", err)
	}
	return nil
}

// Get reads an artifact; a missing one is fs.ErrNotExist.
func (s *Store) Get(k Key) ([]byte, error) {
	if err := k.Validate(); err != nil {
		return nil, err
	}
	return os.ReadFile(s.file(k))
}

// Rebuilder rebuilds a missing artifact from git.
type Rebuilder interface {
	RebuildArtifact(ctx context.Context, k Key) (*Artifact, error)
}

// ErrUnknownArtifact is returned by a Rebuilder when no such artifact was
// ever built (unknown repository, release or revision).
var ErrUnknownArtifact = errors.New("unknown artifact")

// HeaderSHA256 carries "sha256:<hex>" of the served .tar.gz.
const HeaderSHA256 = "X-Artifact-Sha256"

// Server serves GET <Key.Path()> with the sha256 in HeaderSHA256, rebuilding
// artifacts missing from the Store, to callers that present the bearer
// token of Token (the operator). Without a Token it serves nobody.
type Server struct {
	Store     *Store
	Rebuilder Rebuilder
	// Token is the bearer token every request must carry.
	Token TokenSource
	Log   logr.Logger
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// Authenticate before looking at the path: an unauthenticated caller
	// learns nothing, not even which artifacts exist, and cannot make the
	// server rebuild one.
	if s.Token == nil {
		s.Log.Error(nil, "The artifact server has no token configured; refusing every request")
		http.Error(w, "the artifact server has no credential configured", http.StatusServiceUnavailable)
		return
	}
	want, err := s.Token()
	if err != nil {
		s.Log.Error(err, "Reading the artifact token failed; refusing the request")
		http.Error(w, "the artifact server's credential is unavailable", http.StatusServiceUnavailable)
		return
	}
	if err := authorize(r, want); err != nil {
		s.Log.Info("Artifact request refused", "reason", err.Error(), "remote", r.RemoteAddr)
		w.Header().Set("WWW-Authenticate", `Bearer realm="sluice-artifacts"`)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	k, err := ParsePath(r.URL.Path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotFound)
		return
	}
	data, err := s.Store.Get(k)
	if errors.Is(err, os.ErrNotExist) && s.Rebuilder != nil {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
		defer cancel()
		a, rerr := s.Rebuilder.RebuildArtifact(ctx, k)
		if errors.Is(rerr, ErrUnknownArtifact) {
			http.Error(w, "artifact not found", http.StatusNotFound)
			return
		}
		if rerr != nil {
			s.Log.Error(rerr, "Rebuilding a missing artifact failed", "artifact", k.Path())
			http.Error(w, "artifact could not be rebuilt", http.StatusServiceUnavailable)
			return
		}
		if perr := s.Store.Put(k, a.TarGz); perr != nil {
			s.Log.Error(perr, "Storing a rebuilt artifact failed", "artifact", k.Path())
		}
		data, err = a.TarGz, nil
	}
	if errors.Is(err, os.ErrNotExist) {
		http.Error(w, "artifact not found", http.StatusNotFound)
		return
	}
	if err != nil {
		s.Log.Error(err, "Reading an artifact failed", "artifact", k.Path())
		http.Error(w, "artifact unavailable", http.StatusInternalServerError)
		return
	}
	sum := Digest(data)
	w.Header().Set("Content-Type", "application/gzip")
	w.Header().Set("Content-Length", strconv.Itoa(len(data)))
	w.Header().Set(HeaderSHA256, sum)
	w.Header().Set("ETag", `"`+sum+`"`)
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(data)
	}
}
