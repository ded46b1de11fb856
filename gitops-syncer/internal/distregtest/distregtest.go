// Package distregtest runs a real CNCF distribution registry for tests:
// one `registry serve` process on a free loopback port, over TLS with a
// certificate made in the test, behind htpasswd basic auth with a bcrypt
// user made in the test, storing blobs in a private temporary folder, and,
// when asked, sending its push notifications to a webhook receiver. The
// registry is built by `make registry` (bin/registry/<Version>/, see
// hack/registry/build.sh); without it the tests skip, naming the target,
// except under CI, where they fail.
package distregtest

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"
	"helm.sh/helm/v3/pkg/registry"
)

// Version is the distribution registry the tests run (`make registry`
// builds it; hack/registry/go.mod pins it).
const Version = "v3.1.2"

// ErrNotBuilt says the registry binary is missing.
var ErrNotBuilt = errors.New("distribution registry " + Version + " is not built: run `make registry` at the repository root")

// Options say how Start configures the registry.
type Options struct {
	// NotifyURL, when set, is the endpoint the registry sends its
	// notifications to, with the header Authorization: Bearer NotifyToken.
	NotifyURL, NotifyToken string
}

// Registry is a running distribution registry.
type Registry struct {
	// Host is "127.0.0.1:<port>": the host of oci://<Host>/... URLs and
	// the request.host of the registry's notifications.
	Host string
	// User and Password are the one htpasswd user.
	User, Password string
	// Client trusts the registry's certificate.
	Client *http.Client

	cmd  *exec.Cmd
	done chan struct{}
	mu   sync.Mutex
	log  bytes.Buffer
}

// Binary finds bin/registry/<Version>/registry above this package.
func Binary() (string, error) {
	_, file, _, _ := runtime.Caller(0)
	for dir := filepath.Dir(file); ; dir = filepath.Dir(dir) {
		candidate := filepath.Join(dir, "bin", "registry", Version, "registry")
		if fi, err := os.Stat(candidate); err == nil && fi.Mode()&0o111 != 0 {
			return candidate, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil || filepath.Dir(dir) == dir {
			return "", ErrNotBuilt
		}
	}
}

// Start runs the registry for the test and stops it when the test ends.
// When the registry is not built the test is skipped, or fails under CI
// (the CI environment variable set), where `make test` builds it.
func Start(t testing.TB, opts Options) *Registry {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	r := &Registry{User: "pusher", Password: randomHex(t, 16), done: make(chan struct{})}
	hash, err := bcrypt.GenerateFromPassword([]byte(r.Password), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "htpasswd"), []byte(r.User+":"+string(hash)+"\n"))
	certPEM, keyPEM, pool := selfSigned(t)
	write(t, filepath.Join(dir, "tls.crt"), certPEM)
	write(t, filepath.Join(dir, "tls.key"), keyPEM)
	r.Client = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	r.Host = "127.0.0.1:" + freePort(t)
	write(t, filepath.Join(dir, "config.yml"), []byte(config(dir, r.Host, randomHex(t, 16), opts)))

	r.cmd = exec.Command(bin, "serve", filepath.Join(dir, "config.yml"))
	r.cmd.Stdout, r.cmd.Stderr = (*logWriter)(r), (*logWriter)(r)
	// No OpenTelemetry exporter: there is no collector to send traces to.
	r.cmd.Env = append(os.Environ(), "OTEL_TRACES_EXPORTER=none")
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		if t.Failed() {
			logs := r.Logs()
			if len(logs) > 16<<10 {
				logs = "…" + logs[len(logs)-16<<10:]
			}
			t.Logf("the registry's log:\n%s", logs)
		}
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(30 * time.Second):
			_ = r.cmd.Process.Kill()
			<-r.done
		}
	})
	// Ready when /v2/ asks for credentials (and answers with them).
	for {
		select {
		case <-r.done:
			t.Fatalf("the registry exited before serving: %v\n%s", r.cmd.ProcessState, r.Logs())
		default:
		}
		req, _ := http.NewRequest(http.MethodGet, "https://"+r.Host+"/v2/", nil)
		req.SetBasicAuth(r.User, r.Password)
		if resp, err := r.Client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return r
			}
			t.Fatalf("the registry answers /v2/ with %s\n%s", resp.Status, r.Logs())
		}
		select {
		case <-r.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Pusher is Helm's registry client logged in to the registry with its
// user, pushing charts as `helm push` does.
func (r *Registry) Pusher(t testing.TB) *registry.Client {
	t.Helper()
	c, err := registry.NewClient(registry.ClientOptHTTPClient(r.Client), registry.ClientOptBasicAuth(r.User, r.Password),
		registry.ClientOptCredentialsFile(filepath.Join(t.TempDir(), "config.json")))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Logs is what the registry printed so far.
func (r *Registry) Logs() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.log.String()
}

type logWriter Registry

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Write(p)
}

// config is the registry's configuration: filesystem storage in dir,
// TLS, htpasswd, and the notification endpoint with a short timeout and
// backoff, so a delivery the receiver refused is retried soon.
func config(dir, addr, secret string, opts Options) string {
	c := fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: %q}
  delete: {enabled: true}
http:
  addr: %q
  secret: %q
  tls: {certificate: %q, key: %q}
auth:
  htpasswd: {realm: sluice-test, path: %q}
`, filepath.Join(dir, "storage"), addr, secret, filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "htpasswd"))
	if opts.NotifyURL != "" {
		c += fmt.Sprintf(`notifications:
  endpoints:
    - name: sluice
      url: %q
      headers: {Authorization: [%q]}
      timeout: 2s
      threshold: 3
      backoff: 200ms
`, opts.NotifyURL, "Bearer "+opts.NotifyToken)
	}
	return c
}

func selfSigned(t testing.TB) (certPEM, keyPEM []byte, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "distregtest"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), pool
}

// freePort is a loopback port nobody listened on a moment ago.
func freePort(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strings.TrimPrefix(ln.Addr().String(), "127.0.0.1:")
}

func randomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func write(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
