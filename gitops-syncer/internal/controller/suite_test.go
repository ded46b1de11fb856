package controller_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap/zapcore"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

var (
	env       *testenv.Env
	k8s       client.Client
	validator validation.Validator
	// chartDir is the golden-path chart of this repository (charts/service).
	chartDir string
	// servicesDir is the sample catalog of this repository (services/).
	servicesDir string
)

func TestMain(m *testing.M) {
	// Terraform runs re-execute this test binary as their sandboxed child.
	runner.MaybeRunChild()
	ctrl.SetLogger(zap.New(zap.WriteTo(&logs), zap.Level(zapcore.Level(-1))))
	testenv.Main(m, testenv.Options{}, setup)
}

// logs holds every log line of the syncers the tests start.
var logs syncBuffer

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// setup finds this repository's chart and catalog and starts the
// validator the syncers share.
func setup(e *testenv.Env) error {
	env, k8s = e, e.Client

	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	chartDir = filepath.Join(root, "charts", "service")
	servicesDir = filepath.Join(root, "services")

	// Terraform runs in a sandboxed child (a spare one waits, as in the
	// syncer by default) and reaches its release's state only through the
	// state server, with a plan-only credential.
	ctx, cancel := context.WithCancel(context.Background())
	e.Cleanup(cancel)
	state, err := validation.ServeState(ctx, env.Config, "127.0.0.1:0", "", logr.Discard())
	if err != nil {
		return err
	}
	validator, err = validation.NewLibrary(ctx, validation.LibraryOptions{Runner: &runner.Local{Spare: true}, State: state})
	return err
}

// newNamespace creates a control namespace for one test.
func newNamespace(t testing.TB) string { return env.Namespace(t, "t-") }

// runningSyncer is a syncer started for one test.
type runningSyncer struct {
	*syncer.Syncer
	dataDir string
	stop    func()
}

// startSyncer starts a syncer watching ns; it stops at the end of the test.
func startSyncer(t testing.TB, ns, dataDir string, configure ...func(*syncer.Syncer)) *runningSyncer {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	return startSyncerWith(t, syncer.Options{
		ArtifactAddr:       "127.0.0.1:0",
		DataDir:            dataDir,
		AllowFileURLs:      true,
		Namespaces:         []string{ns},
		Validator:          validator,
		SkipNameValidation: true,
	}, configure...)
}

// startSyncerWith starts a syncer with opts; it stops at the end of the test.
func startSyncerWith(t testing.TB, opts syncer.Options, configure ...func(*syncer.Syncer)) *runningSyncer {
	t.Helper()
	dataDir := opts.DataDir
	if opts.ArtifactToken == nil {
		opts.ArtifactToken = artifact.StaticToken(testArtifactToken)
	}
	s, err := syncer.New(env.Config, opts)
	require.NoError(t, err)
	for _, c := range configure {
		c(s)
	}
	run := testenv.Go(t, s)
	return &runningSyncer{Syncer: s, dataDir: dataDir, stop: func() { _ = run.Stop() }}
}

// newRepository creates a Repository tracking main of url.
func newRepository(t *testing.T, ns, name, url string, mutate ...func(*sluicev1.Repository)) *sluicev1.Repository {
	t.Helper()
	repo := &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: sluicev1.RepositorySpec{
			URL:                url,
			Ref:                &sluicev1.GitReference{Branch: "main"},
			Interval:           &metav1.Duration{Duration: time.Hour}, // tests ask for reconciles explicitly
			ServicesPath:       "services",
			TargetNamespaces:   []string{"*"},
			ServiceAccountName: "deployer",
		},
	}
	for _, m := range mutate {
		m(repo)
	}
	require.NoError(t, k8s.Create(context.Background(), repo))
	return repo
}

// requestReconcile sets the reconcile-requested annotation, as
// `kubectl sluice reconcile` would.
func requestReconcile(t *testing.T, repo *sluicev1.Repository) string {
	t.Helper()
	v := time.Now().Format(time.RFC3339Nano)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, sluicev1.AnnotationReconcileRequestedAt, v)
	require.NoError(t, k8s.Patch(context.Background(), repo.DeepCopy(), client.RawPatch("application/merge-patch+json", []byte(patch))))
	return v
}

// waitHandled waits until the syncer handled reconcile request v.
func waitHandled(t *testing.T, repo *sluicev1.Repository, v string) *sluicev1.Repository {
	t.Helper()
	got := &sluicev1.Repository{}
	require.Eventually(t, func() bool {
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(repo), got); err != nil {
			return false
		}
		return got.Status.LastHandledReconcileAt == v
	}, 2*time.Minute, 50*time.Millisecond, "reconcile request %s not handled", v)
	return got
}

// waitReady waits for the Ready condition to have status and reason.
func waitReady(t *testing.T, repo *sluicev1.Repository, status metav1.ConditionStatus, reason string) *metav1.Condition {
	t.Helper()
	var cond *metav1.Condition
	require.Eventually(t, func() bool {
		got := &sluicev1.Repository{}
		if err := k8s.Get(context.Background(), client.ObjectKeyFromObject(repo), got); err != nil {
			return false
		}
		cond = meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionReady)
		return cond != nil && cond.Status == status && cond.Reason == reason
	}, 2*time.Minute, 50*time.Millisecond, "Ready=%s/%s not reached (last: %+v)", status, reason, cond)
	return cond
}

// changeRequests lists the ChangeRequests of ns by name.
func changeRequests(t *testing.T, ns string) map[string]sluicev1.ChangeRequest {
	t.Helper()
	var list sluicev1.ChangeRequestList
	require.NoError(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))
	out := map[string]sluicev1.ChangeRequest{}
	for _, cr := range list.Items {
		out[cr.Name] = cr
	}
	return out
}

func getRelease(t *testing.T, ns, name string) *sluicev1.Release {
	t.Helper()
	rel := &sluicev1.Release{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, rel))
	return rel
}

// helmService writes a Helm-only service using charts/service.
func helmService(r *gittest.Repo, name string, envs ...string) {
	manifest := fmt.Sprintf("apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: %s\nowners: [team-%s]\nchart: {path: charts/service}\nvalues: [values.yaml]\nenvironments:\n", name, name)
	for _, e := range envs {
		manifest += fmt.Sprintf("  - name: %s\n    namespace: %s-%s\n    delivery: helm\n    approval: {required: 1, autoApproveRisk: low}\n", e, name, e)
	}
	r.WriteFile("services/"+name+"/service.yaml", manifest)
	r.WriteFile("services/"+name+"/values.yaml", fmt.Sprintf("image:\n  repository: ghcr.io/example/%s\n  tag: \"1.0.0\"\nreplicaCount: 1\n", name))
}

// seedHelmRepo makes a repository with the golden-path chart and two
// Helm-only services.
func seedHelmRepo(t *testing.T, root, name string) *gittest.Repo {
	t.Helper()
	r := gittest.NewRepo(t, root, name)
	r.CopyDir(chartDir, "charts/service")
	helmService(r, "alpha", "staging")
	helmService(r, "beta", "staging")
	r.Commit("initial catalog", "alice@example.com")
	return r
}

// testArtifactToken is the bearer token of the tests' artifact servers.
const testArtifactToken = "artifact-token-of-the-syncer-tests"

// download fetches an artifact URL, as the operator does, and returns its
// body and sha256 header.
func download(t *testing.T, url string) ([]byte, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testArtifactToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, url)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return body, resp.Header.Get("X-Artifact-Sha256")
}

// newCatalogRepo makes a repository holding this repository's sample
// catalog (services/) and golden-path chart (charts/service).
func newCatalogRepo(t *testing.T, root string) *gittest.Repo {
	t.Helper()
	r := gittest.NewRepo(t, root, "catalog")
	r.CopyDir(chartDir, "charts/service")
	r.CopyDir(servicesDir, "services")
	r.Commit("sample catalog", "alice@example.com")
	return r
}
