// Package testenv starts a real kube-apiserver and etcd (controller-runtime's
// envtest) with the Sluice CRDs installed, for the integration tests of
// every module. Other CRDs (Argo CD's) are the caller's to name in
// Options.CRDDirectoryPaths, so this package depends on no other project.
//
// The binaries are built from the Go module proxy by `make envtest` into
// bin/k8s/<version>-<os>-<arch>/ at the repository root. KUBEBUILDER_ASSETS
// wins when set; otherwise the folder is found by walking up from the working
// directory, so a plain `go test ./...` inside a module works too. When the
// binaries are missing, Start fails with a message that says to run
// `make envtest`; it never skips.
package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/sluice-gitops/sluice/operator/api/crds"
	sluicescheme "github.com/sluice-gitops/sluice/operator/api/scheme"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// KubernetesVersion is the version of the control plane `make envtest` builds.
const KubernetesVersion = "1.37.2"

// Env is a running control plane.
type Env struct {
	// Config is an admin rest.Config for the API server.
	Config *rest.Config
	// Client is an admin client with the Sluice and core kinds registered.
	Client client.Client
	// Scheme knows the core and Sluice kinds.
	Scheme *kruntime.Scheme
	// Environment is the underlying envtest environment (AddUser and so on).
	Environment *envtest.Environment

	cleanupMu sync.Mutex
	cleanups  []func()
}

// Options tune Start.
type Options struct {
	// ExtraCRDs are installed next to the Sluice CRDs.
	ExtraCRDs []*apiextensionsv1.CustomResourceDefinition
	// CRDDirectoryPaths are CRD manifest files or folders installed next
	// to the Sluice CRDs (Argo CD's, for the suites that run it: see
	// argocdtest.CRDPaths in the operator). A path that does not exist
	// fails Start.
	CRDDirectoryPaths []string
	// APIServerFlags are extra kube-apiserver flags (name without "--").
	APIServerFlags map[string]string
}

// Scheme returns a scheme with the client-go and Sluice kinds.
func Scheme() *kruntime.Scheme {
	s, err := sluicescheme.New(apiextensionsv1.AddToScheme)
	if err != nil {
		panic(err)
	}
	return s
}

// Start starts kube-apiserver and etcd with the CRDs installed. Call Stop
// when done.
func Start(opts Options) (*Env, error) {
	// Checked first: envtest would find a missing path only after the
	// control plane started.
	for _, p := range opts.CRDDirectoryPaths {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("CRD path: %w", err)
		}
	}
	assets, err := BinaryAssetsDir()
	if err != nil {
		return nil, err
	}
	sluiceCRDs, err := crds.Load()
	if err != nil {
		return nil, fmt.Errorf("load Sluice CRDs: %w", err)
	}
	all := append(sluiceCRDs, opts.ExtraCRDs...)
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDs:                  all,
		CRDInstallOptions: envtest.CRDInstallOptions{
			Paths:              opts.CRDDirectoryPaths,
			ErrorIfPathMissing: true,
		},
		ErrorIfCRDPathMissing: true,
		// envtest gives each process 20 s; on a machine whose cores are
		// busy kube-apiserver can need longer, and envtest's 5 retries
		// would not help. A bound, not a wait: start returns as soon as
		// the process is healthy. KUBEBUILDER_CONTROLPLANE_START_TIMEOUT
		// still overrides it.
		ControlPlaneStartTimeout: startTimeout(),
		ControlPlaneStopTimeout:  time.Minute,
	}
	args := env.ControlPlane.GetAPIServer().Configure()
	for k, v := range opts.APIServerFlags {
		args.Set(k, v)
	}
	cfg, err := env.Start()
	if err != nil {
		// envtest leaves the control plane running when a later step
		// (installing the CRDs) fails.
		_ = env.Stop()
		return nil, fmt.Errorf("start envtest (binaries in %s): %w", assets, err)
	}
	scheme := Scheme()
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Env{Config: cfg, Client: c, Scheme: scheme, Environment: env}, nil
}

// Stop runs the cleanups registered with Cleanup (last first), then stops
// the control plane.
func (e *Env) Stop() error {
	if e == nil || e.Environment == nil {
		return nil
	}
	e.runCleanups()
	return e.Environment.Stop()
}

// WaitAllowed waits until the API server's authorizer allows what spec asks.
// The RBAC authorizer reads Roles and bindings through informers, so a
// binding just created takes a moment to count; tests that create one and
// then act as its subject wait here first.
func (e *Env) WaitAllowed(ctx context.Context, spec authorizationv1.SubjectAccessReviewSpec) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		sar := &authorizationv1.SubjectAccessReview{Spec: spec}
		if err := e.Client.Create(ctx, sar); err != nil {
			return fmt.Errorf("subject access review: %w", err)
		}
		if sar.Status.Allowed {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s is still not allowed %+v: %s", spec.User, spec.ResourceAttributes, sar.Status.Reason)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// GrantRole creates the Role name with rules in namespace, binds it to
// the ServiceAccount sa, and waits until the authorizer allows sa probe
// there (probe must be something the rules grant).
func (e *Env) GrantRole(ctx context.Context, namespace, name string, sa types.NamespacedName, rules []rbacv1.PolicyRule, probe authorizationv1.ResourceAttributes) error {
	if err := e.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rules}); err != nil {
		return fmt.Errorf("create Role %s/%s: %w", namespace, name, err)
	}
	if err := e.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa.Name, Namespace: sa.Namespace}},
	}); err != nil {
		return fmt.Errorf("create RoleBinding %s/%s: %w", namespace, name, err)
	}
	probe.Namespace = namespace
	return e.WaitAllowed(ctx, authorizationv1.SubjectAccessReviewSpec{
		User: "system:serviceaccount:" + sa.Namespace + ":" + sa.Name, ResourceAttributes: &probe,
	})
}

// WaitChangePhase polls the ChangeRequest key until its phase is want. It
// gives up early when the change ends in another terminal phase, and after
// timeout; the error then carries the phase and conditions it had.
func (e *Env) WaitChangePhase(ctx context.Context, key client.ObjectKey, want sluicev1.ChangeRequestPhase, timeout time.Duration) (*sluicev1.ChangeRequest, error) {
	got := &sluicev1.ChangeRequest{}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if err := e.Client.Get(ctx, key, got); err != nil {
			return nil, err
		}
		if got.Status.Phase == want {
			return got, nil
		}
		if got.Status.Phase.IsTerminal() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil, fmt.Errorf("ChangeRequest %s: want phase %s, have %s: %+v", key.Name, want, got.Status.Phase, got.Status.Conditions)
}

// Namespace creates a namespace named prefix plus a random suffix for one
// test and returns its name; an error fails tb.
func (e *Env) Namespace(tb testing.TB, prefix string) string {
	tb.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		tb.Fatalf("create namespace %s*: %v", prefix, err)
	}
	return ns.Name
}

// CreateNamespaces creates the named namespaces, for suite set-ups.
func (e *Env) CreateNamespaces(ctx context.Context, names ...string) error {
	for _, name := range names {
		if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			return fmt.Errorf("create namespace %s: %w", name, err)
		}
	}
	return nil
}

// ClientAs returns a client (Scheme) that impersonates user with groups
// through the admin connection, so RBAC and admission see that user.
func (e *Env) ClientAs(user string, groups ...string) (client.Client, error) {
	cfg := rest.CopyConfig(e.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: groups}
	return client.New(cfg, client.Options{Scheme: e.Scheme})
}

// AddUser adds a user with the given groups and returns a rest.Config that
// authenticates as that user (RBAC applies).
func (e *Env) AddUser(name string, groups ...string) (*rest.Config, error) {
	u, err := e.Environment.AddUser(envtest.User{Name: name, Groups: groups}, e.Config)
	if err != nil {
		return nil, err
	}
	return u.Config(), nil
}

// AdminKubeconfig adds user in the group system:masters and writes a
// kubeconfig for it into a folder removed when the control plane stops;
// it returns the file's path. Programs that take a kubeconfig (terraform's
// kubernetes backend) use it.
func (e *Env) AdminKubeconfig(user string) (string, error) {
	cfg, err := e.AddUser(user, "system:masters")
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "testenv-kubeconfig-")
	if err != nil {
		return "", err
	}
	e.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "kubeconfig")
	return path, WriteKubeconfig(cfg, path, "")
}

// KubeconfigContext is the one context WriteKubeconfig writes.
const KubeconfigContext = "envtest"

// WriteKubeconfig writes a kubeconfig for cfg (its client certificate and
// key, or its bearer token) to path, for programs that take a kubeconfig:
// terraform's kubernetes backend, kubectl plugins. Its one context,
// KubeconfigContext, is current and uses namespace ns ("" for none).
func WriteKubeconfig(cfg *rest.Config, path, ns string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["envtest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["user"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts[KubeconfigContext] = &clientcmdapi.Context{Cluster: "envtest", AuthInfo: "user", Namespace: ns}
	kc.CurrentContext = KubeconfigContext
	return clientcmd.WriteToFile(*kc, path)
}

// ErrNoBinaries says the control-plane binaries have not been built.
var ErrNoBinaries = errors.New("envtest binaries (kube-apiserver, etcd) not found: run `make envtest` at the repository root, or set KUBEBUILDER_ASSETS")

// BinaryAssetsDir finds the folder holding kube-apiserver and etcd.
func BinaryAssetsDir() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		if hasBinaries(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s: %w", dir, ErrNoBinaries)
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	rel := filepath.Join("bin", "k8s", KubernetesVersion+"-"+goosArch())
	for dir := wd; ; dir = filepath.Dir(dir) {
		if candidate := filepath.Join(dir, rel); hasBinaries(candidate) {
			return candidate, nil
		}
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			break // the repository root: no further up.
		}
		if filepath.Dir(dir) == dir {
			break
		}
	}
	return "", ErrNoBinaries
}

func hasBinaries(dir string) bool {
	for _, b := range []string{"kube-apiserver", "etcd"} {
		fi, err := os.Stat(filepath.Join(dir, b))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func goosArch() string { return runtime.GOOS + "-" + runtime.GOARCH }

// startTimeout bounds the start of each control-plane process: 5 minutes,
// or KUBEBUILDER_CONTROLPLANE_START_TIMEOUT when it is set (envtest reads
// it only when the field is zero).
func startTimeout() time.Duration {
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") != "" {
		return 0
	}
	return 5 * time.Minute
}
