package drift

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	helmapplier "github.com/sluice-gitops/sluice/operator/internal/applier/helm"
)

// countingClient counts the writes made through it.
type countingClient struct {
	client.Client
	writes atomic.Int64
}

func (c *countingClient) Create(ctx context.Context, o client.Object, opts ...client.CreateOption) error {
	c.writes.Add(1)
	return c.Client.Create(ctx, o, opts...)
}

func (c *countingClient) Update(ctx context.Context, o client.Object, opts ...client.UpdateOption) error {
	c.writes.Add(1)
	return c.Client.Update(ctx, o, opts...)
}

func (c *countingClient) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.PatchOption) error {
	c.writes.Add(1)
	return c.Client.Patch(ctx, o, p, opts...)
}

func (c *countingClient) Status() client.SubResourceWriter {
	return &countingStatus{SubResourceWriter: c.Client.Status(), writes: &c.writes}
}

type countingStatus struct {
	client.SubResourceWriter
	writes *atomic.Int64
}

func (s *countingStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	s.writes.Add(1)
	return s.SubResourceWriter.Patch(ctx, o, p, opts...)
}

func (s *countingStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	s.writes.Add(1)
	return s.SubResourceWriter.Update(ctx, o, opts...)
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchReleases installs n Helm releases of objs objects each as Helm
// stores them (a deployed release record whose manifest hashes to the
// change's manifestDigest, and the objects created by Helm's field
// manager), each with its Release, Applied ChangeRequest and a Repository
// in drift mode warn, and returns the Releases' keys.
func benchReleases(b *testing.B, n, objs int) []types.NamespacedName {
	ctx := context.Background()
	c := env.Client
	ctl := fmt.Sprintf("bench-ctl-%d", time.Now().UnixNano())
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ctl}}))
	must(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: ctl}}))
	must(c.Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ctl}, Rules: []rbacv1.PolicyRule{{APIGroups: []string{"", "apps"}, Resources: []string{"*"}, Verbs: []string{"*"}}}}))
	must(c.Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ctl},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: ctl},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "deployer", Namespace: ctl}}}))
	must(env.WaitAllowed(ctx, authorizationv1.SubjectAccessReviewSpec{User: "system:serviceaccount:" + ctl + ":deployer",
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "list", Resource: "secrets", Namespace: "any"}}))
	must(c.Create(ctx, &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ctl}, Spec: sluicev1.RepositorySpec{
		URL: "https://git.example.com/infra.git", ServiceAccountName: "deployer", TargetNamespaces: []string{ctl + "-*"},
		Drift: &sluicev1.DriftPolicy{Mode: sluicev1.DriftWarn}}}))
	cs, err := kubernetes.NewForConfig(env.Config)
	must(err)
	var keys []types.NamespacedName
	for i := range n {
		name := fmt.Sprintf("svc%d-prod", i)
		target := fmt.Sprintf("%s-%d", ctl, i)
		must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: target}}))
		var docs []string
		for j := range objs {
			cm := &corev1.ConfigMap{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, j), Labels: map[string]string{"app.kubernetes.io/instance": name}},
				Data:       map[string]string{"key": strings.Repeat("v", 200), "index": fmt.Sprint(j)}}
			y, err := yaml.Marshal(cm)
			must(err)
			docs = append(docs, "---\n# Source: bench/templates/cm.yaml\n"+string(y))
			cm.Namespace = target
			must(c.Create(ctx, cm, client.FieldOwner(HelmFieldManager())))
		}
		manifest := strings.Join(docs, "")
		commit := appliertest.RandomSHA()
		cr := &sluicev1.ChangeRequest{
			ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(name, commit, 1), Namespace: ctl},
			Spec: sluicev1.ChangeRequestSpec{Release: name, Revision: commit, Attempt: 1, TargetNamespace: target, Delivery: sluicev1.DeliveryHelm,
				Artifact:       sluicev1.ArtifactReference{URL: "https://artifacts.example/x.tar.gz", SHA256: sluicev1.SHA256Digest([]byte(commit))},
				ContentDigest:  sluicev1.SHA256Digest([]byte(commit)),
				ManifestDigest: sluicev1.Digest(helmcheck.ReleaseDigest([]byte(manifest), nil)),
				Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow}},
		}
		cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
		must(c.Create(ctx, cr))
		cr.Status.Phase = sluicev1.PhaseApplied
		cr.Status.Apply = &sluicev1.ApplyResult{Applier: "helm", HelmRevision: 1}
		must(c.Status().Update(ctx, cr))
		store := storage.Init(driver.NewSecrets(cs.CoreV1().Secrets(target)))
		must(store.Create(&release.Release{Name: name, Namespace: target, Version: 1, Manifest: manifest,
			Chart:  &chart.Chart{Metadata: &chart.Metadata{Name: "bench", Version: "0.1.0"}},
			Info:   &release.Info{Status: release.StatusDeployed, Description: "bench"},
			Labels: map[string]string{helmapplier.LabelApproval: strings.TrimPrefix(string(cr.Spec.ApprovalDigest), "sha256:")[:40]}}))
		rel := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ctl}, Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: fmt.Sprintf("svc%d", i), Environment: "prod", SourcePath: "services/x", TargetNamespace: target,
			Chart: sluicev1.ChartSource{Path: "charts/x"}, Delivery: sluicev1.DeliveryHelm}}
		must(c.Create(ctx, rel))
		rel.Status.AppliedChange, rel.Status.AppliedRevision, rel.Status.AppliedDigest = cr.Name, commit, cr.Spec.ApprovalDigest
		must(c.Status().Update(ctx, rel))
		keys = append(keys, client.ObjectKeyFromObject(rel))
	}
	return keys
}

// BenchmarkDriftPass is one drift pass over 100 releases of 20 objects
// each, nothing drifted: it reports the operator's CPU time per pass
// (user + system of this process; the API server is another process) and
// the writes per pass, which must be 0. The first pass, which records the
// Drifted=False conditions, is made before the timer starts.
func BenchmarkDriftPass(b *testing.B) {
	const objects = 20
	releases := 100
	if os.Getenv("BENCH_SMOKE") != "" {
		releases = 3 // make bench-smoke: the benchmark runs, its figure means nothing
	}
	keys := benchReleases(b, releases, objects)
	hc, err := apiutilHTTPClient()
	if err != nil {
		b.Fatal(err)
	}
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, hc)
	if err != nil {
		b.Fatal(err)
	}
	cc := &countingClient{Client: env.Client}
	r := &Reconciler{Client: cc, Helm: &HelmChecker{Config: env.Config, Mapper: mapper}}
	pass := func() {
		for _, k := range keys {
			res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: k})
			if err != nil {
				b.Fatal(err)
			}
			if res.RequeueAfter != sluicev1.DefaultDriftInterval {
				b.Fatalf("release %s: requeue after %s", k, res.RequeueAfter)
			}
		}
	}
	pass() // records Drifted=False once
	var rel sluicev1.Release
	if err := env.Client.Get(context.Background(), keys[0], &rel); err != nil {
		b.Fatal(err)
	}
	if rel.Status.Drift != nil || len(rel.Status.Conditions) == 0 || rel.Status.Conditions[0].Reason != sluicev1.ReasonNoDrift {
		b.Fatalf("the first pass found drift: %+v", rel.Status)
	}
	cc.writes.Store(0)
	b.ResetTimer()
	cpu := cpuTime()
	for range b.N {
		pass()
	}
	b.StopTimer()
	b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/pass")
	b.ReportMetric(float64(cc.writes.Load())/float64(b.N), "writes/pass")
	if w := cc.writes.Load(); w != 0 {
		b.Fatalf("a pass with nothing drifted made %d writes", w)
	}
}

func apiutilHTTPClient() (*http.Client, error) { return rest.HTTPClientFor(env.Config) }
