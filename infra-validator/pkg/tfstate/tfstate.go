package tfstate

import (
	"crypto/rand"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
)

// Mode says what a credential may do with its one state.
type Mode string

const (
	// ModePlan reads the state and takes and releases its lock; it never
	// writes.
	ModePlan Mode = "plan"
	// ModeApply reads, locks and writes the state.
	ModeApply Mode = "apply"
)

// DefaultTTL is how long a credential lives when Grant.TTL is zero.
const DefaultTTL = time.Hour

// MaxTTL is the longest credential Grant hands out.
const MaxTTL = 24 * time.Hour

// DefaultMaxStateBytes caps an uploaded (and a stored, uncompressed) state
// when Options.MaxStateBytes is zero.
const DefaultMaxStateBytes = 32 << 20

// Username is the basic-auth user name of every credential; the password
// carries the token.
const Username = "sluice-run"

// PathPrefix is where Handler serves: PathPrefix/<namespace>/<workspace>/<release>.
const PathPrefix = "/tfstate/"

// Grant asks for a credential.
type Grant struct {
	// Namespace is the control namespace holding the state.
	Namespace string
	// Release is the release; the kubernetes backend's secret_suffix.
	Release string
	// Workspace is the Terraform workspace; "" means "default".
	Workspace string
	// Mode is what the credential may do.
	Mode Mode
	// TTL is how long the credential lives; 0 means DefaultTTL. At most MaxTTL.
	TTL time.Duration
}

// Credential is what a run gets: exactly one release's state, one mode,
// until it expires.
type Credential struct {
	Address, LockAddress, UnlockAddress string
	// Username is Username; Password is the run token.
	Username, Password string
}

// Env returns the environment that configures Terraform's http backend
// (`terraform { backend "http" {} }`) for this credential. The lock and
// unlock methods are the backend's defaults, LOCK and UNLOCK.
func (c Credential) Env() map[string]string {
	return map[string]string{
		"TF_HTTP_ADDRESS":        c.Address,
		"TF_HTTP_LOCK_ADDRESS":   c.LockAddress,
		"TF_HTTP_UNLOCK_ADDRESS": c.UnlockAddress,
		"TF_HTTP_USERNAME":       c.Username,
		"TF_HTTP_PASSWORD":       c.Password,
	}
}

// Secrets returns the values every output of the run must redact.
func (c Credential) Secrets() []string {
	if c.Password == "" {
		return nil
	}
	return []string{c.Password}
}

// Options configure a Server.
type Options struct {
	// BaseURL is how runners reach this server, e.g. http://127.0.0.1:8092.
	// Credentials carry addresses below it.
	BaseURL string
	// Log receives one line per refused or failed request, never a token.
	// The zero Logger discards.
	Log logr.Logger
	// MaxStateBytes caps a state; 0 means DefaultMaxStateBytes.
	MaxStateBytes int64
	// Now is the clock; nil means time.Now. Tests move it to expire tokens.
	Now func() time.Time
}

// Server serves Terraform's http backend protocol for states kept in the
// kubernetes backend's Secrets and Leases. Create it with NewServer.
type Server struct {
	cs      kubernetes.Interface
	base    *url.URL
	log     logr.Logger
	maxSize int64
	now     func() time.Time
	key     []byte

	// revoked holds the runs whose credentials Revoke ended, with their
	// expiry.
	revokedMu sync.Mutex
	revoked   map[string]int64
}

// NewServer returns a Server reading and writing state through cs, with a
// fresh random token key: credentials of an earlier process are refused.
func NewServer(cs kubernetes.Interface, opts Options) (*Server, error) {
	if cs == nil {
		return nil, errors.New("tfstate: a Kubernetes client is required")
	}
	base, err := url.Parse(strings.TrimRight(opts.BaseURL, "/"))
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || base.RawQuery != "" || base.Fragment != "" || base.User != nil {
		return nil, fmt.Errorf("tfstate: base URL %q must be an http(s) URL with a host and no credentials, query or fragment", opts.BaseURL)
	}
	s := &Server{cs: cs, base: base, log: opts.Log, maxSize: opts.MaxStateBytes, now: opts.Now, key: make([]byte, 32)}
	if s.maxSize <= 0 {
		s.maxSize = DefaultMaxStateBytes
	}
	if s.now == nil {
		s.now = time.Now
	}
	if _, err := rand.Read(s.key); err != nil {
		return nil, fmt.Errorf("tfstate: token key: %w", err)
	}
	return s, nil
}

// Grant returns a credential for g's state. It checks the names only; the
// state need not exist yet.
func (s *Server) Grant(g Grant) (Credential, error) {
	st, err := newStateRef(g.Namespace, g.Workspace, g.Release)
	if err != nil {
		return Credential{}, err
	}
	if g.Mode != ModePlan && g.Mode != ModeApply {
		return Credential{}, fmt.Errorf("tfstate: mode %q is neither %q nor %q", g.Mode, ModePlan, ModeApply)
	}
	ttl := g.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < 0 || ttl > MaxTTL {
		return Credential{}, fmt.Errorf("tfstate: TTL %s is outside (0, %s]", g.TTL, MaxTTL)
	}
	run := make([]byte, 12)
	if _, err := rand.Read(run); err != nil {
		return Credential{}, fmt.Errorf("tfstate: run id: %w", err)
	}
	tok := s.sign(claims{
		Namespace: st.Namespace, Workspace: st.Workspace, Release: st.Release, Mode: g.Mode,
		Expires: s.now().Add(ttl).Unix(), Run: fmt.Sprintf("%x", run),
	})
	addr := s.base.JoinPath(PathPrefix, st.Namespace, st.Workspace, st.Release).String()
	return Credential{Address: addr, LockAddress: addr, UnlockAddress: addr, Username: Username, Password: tok}, nil
}

// Handler returns the http.Handler serving PathPrefix.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serveHTTP) }

// stateRef names one state: its Secret and its Lease.
type stateRef struct {
	Namespace, Workspace, Release string
}

func newStateRef(namespace, workspace, release string) (stateRef, error) {
	if workspace == "" {
		workspace = "default"
	}
	st := stateRef{Namespace: namespace, Workspace: workspace, Release: release}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return stateRef{}, fmt.Errorf("tfstate: namespace %q: %s", namespace, strings.Join(errs, "; "))
	}
	if release == "" || workspace == "" {
		return stateRef{}, errors.New("tfstate: release and workspace are required")
	}
	if strings.Contains(release, "/") || strings.Contains(workspace, "/") {
		return stateRef{}, fmt.Errorf("tfstate: release %q or workspace %q contains '/'", release, workspace)
	}
	// The Lease name is the longest: it must be a DNS subdomain, as the
	// Secret's.
	if errs := validation.IsDNS1123Subdomain(st.leaseName()); len(errs) > 0 {
		return stateRef{}, fmt.Errorf("tfstate: workspace %q and release %q do not make a valid object name: %s", workspace, release, strings.Join(errs, "; "))
	}
	return st, nil
}

// secretName is the kubernetes backend's Secret name.
func (st stateRef) secretName() string { return "tfstate-" + st.Workspace + "-" + st.Release }

// leaseName is the kubernetes backend's Lease name.
func (st stateRef) leaseName() string { return "lock-" + st.secretName() }
