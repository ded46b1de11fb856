package benchhelm

import (
	"context"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/cli/values"
	"helm.sh/helm/v3/pkg/getter"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	helmapplier "github.com/sluice-gitops/sluice/operator/internal/applier/helm"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
)

// The control plane starts on the first benchmark only, so `go test` of the
// whole module pays nothing for this package.
var suite = &testenv.Suite{Lazy: true}

func TestMain(m *testing.M) { suite.Main(m) }

const stagingValues = "message: benchmark\nreplicas: 2\n"

// files is the artifact's content: the chart and the service folder.
func files(b *testing.B, target string) map[string][]byte {
	out := map[string][]byte{
		"services/web/service.yaml": []byte(fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {path: charts/web}
values: [values.yaml]
environments:
  - name: staging
    namespace: %s
    values: [values-staging.yaml]
    delivery: helm
    approval: {required: 0, autoApproveRisk: low}
`, target)),
		"services/web/values.yaml":         []byte("replicas: 1\n"),
		"services/web/values-staging.yaml": []byte(stagingValues),
	}
	err := filepath.WalkDir("testdata/web", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel("testdata/web", p)
		out[path.Join("charts/web", filepath.ToSlash(rel))] = data
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// offlineDigest is the manifestDigest the validator records (helmcheck).
func offlineDigest(b *testing.B, dir, name, ns string) sluicev1.Digest {
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{
		Chart:       filepath.Join(dir, "charts/web"),
		ValuesFiles: []string{filepath.Join(dir, "services/web/values.yaml"), filepath.Join(dir, "services/web/values-staging.yaml")},
		ReleaseName: name, Namespace: ns,
	})
	if err != nil || res.ManifestDigest == "" {
		b.Fatalf("render: %v %v", err, res)
	}
	return sluicev1.Digest(res.ManifestDigest)
}

func writeTree(b *testing.B, files map[string][]byte) string {
	dir := b.TempDir()
	for n, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	return dir
}

func loadChart(b *testing.B, dir string) (*chart.Chart, map[string]any) {
	ch, err := loader.LoadDir(filepath.Join(dir, "charts/web"))
	if err != nil {
		b.Fatal(err)
	}
	vals, err := (&values.Options{ValueFiles: []string{
		filepath.Join(dir, "services/web/values.yaml"), filepath.Join(dir, "services/web/values-staging.yaml"),
	}}).MergeValues(getter.Providers{})
	if err != nil {
		b.Fatal(err)
	}
	return ch, vals
}

func namespace(b *testing.B, e *testenv.Env, name string) {
	if err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
		b.Fatal(err)
	}
}

// applierBench is the Helm applier with what each of its installs needs:
// the artifact server it downloads from and the control namespace.
type applierBench struct {
	e    *testenv.Env
	a    *helmapplier.Applier
	srv  *httptest.Server
	ctl  string
	mu   sync.Mutex
	blob map[string][]byte
	n    int
}

func newApplierBench(b *testing.B) *applierBench {
	ab := &applierBench{e: suite.Env(b), blob: map[string][]byte{}}
	ab.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ab.mu.Lock()
		data, ok := ab.blob[strings.TrimPrefix(r.URL.Path, "/artifacts/")]
		ab.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(data)
	}))
	b.Cleanup(ab.srv.Close)
	fetcher, err := artifact.NewFetcher(ab.srv.URL + "/artifacts/")
	if err != nil {
		b.Fatal(err)
	}
	fetcher.TempDir = b.TempDir()
	if ab.a, err = helmapplier.New(helmapplier.Options{Config: ab.e.Config, Fetcher: fetcher, Log: logr.Discard()}); err != nil {
		b.Fatal(err)
	}
	ab.ctl = fmt.Sprintf("bench-ctl-%d", time.Now().UnixNano())
	namespace(b, ab.e, ab.ctl)
	return ab
}

// install prepares one target namespace, its RBAC and its ChangeRequest
// (untimed), then times the applier's install of it.
func (ab *applierBench) install(b *testing.B) time.Duration {
	ctx := context.Background()
	e := ab.e
	ab.n++
	target := fmt.Sprintf("bench-app-%d-%d", time.Now().UnixNano(), ab.n)
	namespace(b, e, target)
	if err := e.Client.Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: target},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"", "apps"}, Resources: []string{"*"}, Verbs: []string{"*"}}},
	}); err != nil {
		b.Fatal(err)
	}
	if err := e.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: target},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "deployer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "deployer", Namespace: ab.ctl}},
	}); err != nil {
		b.Fatal(err)
	}
	if err := e.WaitAllowed(context.Background(), authorizationv1.SubjectAccessReviewSpec{
		User:               "system:serviceaccount:" + ab.ctl + ":deployer",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: target, Verb: "list", Resource: "secrets"},
	}); err != nil {
		b.Fatal(err)
	}
	content := files(b, target)
	tb := artifacttest.Tarball(content)
	gz := artifacttest.Gzip(tb)
	name := fmt.Sprintf("%d.tar.gz", ab.n)
	ab.mu.Lock()
	ab.blob[name] = gz
	ab.mu.Unlock()
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "web-staging-0123456789", Namespace: ab.ctl},
		Spec: sluicev1.ChangeRequestSpec{
			Release: "web-staging", Revision: strings.Repeat("a", 40), TargetNamespace: target,
			Source: &sluicev1.ChangeSource{Service: "web", Environment: "staging", Path: "services/web",
				Chart: sluicev1.ChartSource{Path: "charts/web"}, Values: []sluicev1.RelativePath{"values.yaml", "values-staging.yaml"}},
			Artifact:       sluicev1.ArtifactReference{URL: ab.srv.URL + "/artifacts/" + name, SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: offlineDigest(b, writeTree(b, content), "web-staging", target),
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	req := applier.Request{
		Change:  cr,
		Release: &applier.ReleaseRef{Namespace: ab.ctl, Name: "web-staging"},
		Repository: &sluicev1.Repository{
			ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ab.ctl},
			Spec:       sluicev1.RepositorySpec{ServiceAccountName: "deployer", TargetNamespaces: []string{"bench-app-*"}},
		},
	}
	t0 := time.Now()
	res, err := ab.a.Apply(ctx, req)
	took := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if res.HelmRevision != 1 {
		b.Fatalf("revision %d", res.HelmRevision)
	}
	return took
}

func BenchmarkHelmApplier(b *testing.B) {
	ab := newApplierBench(b)
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		total += ab.install(b)
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "install-ms/op")
}

func BenchmarkBareHelmInstall(b *testing.B) { benchBare(b, false) }

// BenchmarkBareHelmInstallPinnedCapabilities is the bare install with the
// render capabilities pinned, as the applier pins them (no discovery of the
// server's version and API groups): the applier's own Helm step, so the
// difference to BenchmarkHelmApplier is its verification overhead.
func BenchmarkBareHelmInstallPinnedCapabilities(b *testing.B) { benchBare(b, true) }

func benchBare(b *testing.B, pinned bool) {
	e := suite.Env(b)
	b.ResetTimer()
	var total time.Duration
	for i := 0; i < b.N; i++ {
		total += bareInstall(b, e, pinned, i)
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "install-ms/op")
}

// BenchmarkHelmApplierVsBare alternates the three installs (the applier, a
// bare Helm SDK install with discovery, one with pinned capabilities), so
// load that comes and goes weighs on each side alike; it reports each
// side's median and the ratios of the medians.
func BenchmarkHelmApplierVsBare(b *testing.B) {
	ab := newApplierBench(b)
	var viaApplier, bare, pinned []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		viaApplier = append(viaApplier, ab.install(b))
		bare = append(bare, bareInstall(b, ab.e, false, i))
		pinned = append(pinned, bareInstall(b, ab.e, true, i))
	}
	b.StopTimer()
	a, d, p := medianMs(viaApplier), medianMs(bare), medianMs(pinned)
	b.ReportMetric(a, "applier-p50-ms")
	b.ReportMetric(d, "bare-p50-ms")
	b.ReportMetric(p, "pinned-p50-ms")
	b.ReportMetric(a/d, "ratio-bare")
	b.ReportMetric(a/p, "ratio-pinned")
}

func medianMs(d []time.Duration) float64 {
	s := slices.Clone(d)
	slices.Sort(s)
	return float64(s[len(s)/2].Microseconds()) / 1000
}

// bareInstall times one bare Helm SDK install of the chart into a new
// namespace (made untimed).
func bareInstall(b *testing.B, e *testenv.Env, pinned bool, i int) time.Duration {
	target := fmt.Sprintf("bench-bare-%d-%d", time.Now().UnixNano(), i)
	namespace(b, e, target)
	dir := writeTree(b, files(b, target))
	t0 := time.Now()
	ch, vals := loadChart(b, dir)
	cfg := bareConfig(b, e.Config, target)
	if pinned {
		caps := chartutil.DefaultCapabilities.Copy()
		kv, err := chartutil.ParseKubeVersion(helmcheck.DefaultKubeVersion)
		if err != nil {
			b.Fatal(err)
		}
		caps.KubeVersion = *kv
		cfg.Capabilities = caps
	}
	in := action.NewInstall(cfg)
	in.ReleaseName, in.Namespace = "web-staging", target
	rel, err := in.Run(ch, vals)
	took := time.Since(t0)
	if err != nil {
		b.Fatal(err)
	}
	if rel.Version != 1 {
		b.Fatalf("revision %d", rel.Version)
	}
	return took
}

// bareConfig is what a plain Helm SDK program does: the operator's own
// config through genericclioptions, Secrets storage in the namespace.
func bareConfig(b *testing.B, rc *rest.Config, ns string) *action.Configuration {
	flags := genericclioptions.NewConfigFlags(false)
	flags.WrapConfigFn = func(*rest.Config) *rest.Config { return rest.CopyConfig(rc) }
	flags.Namespace = &ns
	apiServer := rc.Host
	flags.APIServer = &apiServer
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		b.Fatal(err)
	}
	kc := kube.New(flags)
	kc.Namespace = ns
	return &action.Configuration{
		RESTClientGetter: flags,
		KubeClient:       kc,
		Releases:         storage.Init(driver.NewSecrets(cs.CoreV1().Secrets(ns))),
		Log:              func(string, ...any) {},
	}
}
