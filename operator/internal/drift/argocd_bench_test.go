package drift

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	argoapplier "github.com/sluice-gitops/sluice/operator/internal/applier/argocd"
	"github.com/sluice-gitops/sluice/operator/internal/applier/argocd/argocdtest"
)

// benchArgoReleases creates n releases delivered by Argo CD, each with its
// Applied ChangeRequest and an Application as the Argo CD applier sets it
// and Argo CD reports it once delivered (objs resources Synced, the
// approved revision Synced and Healthy; the Application CRD keeps status
// in the main resource, so no Argo CD is needed to write it).
func benchArgoReleases(b *testing.B, n, objs int) []types.NamespacedName {
	ctx := context.Background()
	c := env.Client
	ctl := fmt.Sprintf("bench-argo-%d", time.Now().UnixNano())
	must := func(err error) {
		if err != nil {
			b.Fatal(err)
		}
	}
	must(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ctl}}))
	must(c.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "deployer", Namespace: ctl}}))
	must(env.GrantRole(ctx, ctl, "argocd-apps", types.NamespacedName{Namespace: ctl, Name: "deployer"},
		[]rbacv1.PolicyRule{{APIGroups: []string{"argoproj.io"}, Resources: []string{"applications"}, Verbs: []string{"get"}}},
		authorizationv1.ResourceAttributes{Verb: "get", Group: "argoproj.io", Resource: "applications"}))
	// A real repository: the checker reads what Argo CD rendered from git
	// (once per commit).
	git := argocdtest.NewGitRepo(b)
	commit := git.Commit(map[string][]byte{"services/x/service.yaml": []byte("name: x\n")})
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: ctl}, Spec: sluicev1.RepositorySpec{
		URL: git.URL, ServiceAccountName: "deployer", TargetNamespaces: []string{ctl + "-*"},
		Drift: &sluicev1.DriftPolicy{Mode: sluicev1.DriftWarn}}}
	must(c.Create(ctx, repo))
	var keys []types.NamespacedName
	for i := range n {
		name := fmt.Sprintf("svc%d-prod", i)
		target := fmt.Sprintf("%s-%d", ctl, i)
		cr := &sluicev1.ChangeRequest{
			ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(name, commit, 1), Namespace: ctl},
			Spec: sluicev1.ChangeRequestSpec{Release: name, Revision: commit, Attempt: 1, TargetNamespace: target, Delivery: sluicev1.DeliveryArgoCD,
				Source:         &sluicev1.ChangeSource{Service: fmt.Sprintf("svc%d", i), Environment: "prod", Path: "services/x", Chart: sluicev1.ChartSource{Path: "charts/x"}},
				Artifact:       sluicev1.ArtifactReference{URL: "https://artifacts.example/x.tar.gz", SHA256: sluicev1.SHA256Digest([]byte(commit))},
				ContentDigest:  sluicev1.SHA256Digest([]byte(commit)),
				ManifestDigest: sluicev1.SHA256Digest([]byte("manifest " + commit)),
				Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow}},
		}
		cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
		must(c.Create(ctx, cr))
		cr.Status.Phase = sluicev1.PhaseApplied
		must(c.Status().Update(ctx, cr))
		rel := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ctl}, Spec: sluicev1.ReleaseSpec{
			Repository: "infra", Service: fmt.Sprintf("svc%d", i), Environment: "prod", SourcePath: "services/x", TargetNamespace: target,
			Chart: sluicev1.ChartSource{Path: "charts/x"}, Delivery: sluicev1.DeliveryArgoCD}}
		must(c.Create(ctx, rel))
		rel.Status.AppliedChange, rel.Status.AppliedRevision, rel.Status.AppliedDigest = cr.Name, commit, cr.Spec.ApprovalDigest
		must(c.Status().Update(ctx, rel))

		src := map[string]any{"repoURL": repo.Spec.URL, "targetRevision": commit, "path": "services/x", "plugin": map[string]any{"name": argoapplier.PluginName}}
		resources := make([]any, 0, objs)
		for j := range objs {
			resources = append(resources, map[string]any{"version": "v1", "kind": "ConfigMap", "namespace": target, "name": fmt.Sprintf("%s-%d", name, j), "status": "Synced"})
		}
		app := &unstructured.Unstructured{Object: map[string]any{
			"spec": map[string]any{"project": argoapplier.ProjectName(repo), "source": src,
				"destination": map[string]any{"server": argoapplier.InClusterServer, "namespace": target}},
			"status": map[string]any{
				"sync":       map[string]any{"status": "Synced", "revision": commit, "comparedTo": map[string]any{"source": src, "destination": map[string]any{"server": argoapplier.InClusterServer, "namespace": target}}},
				"health":     map[string]any{"status": "Healthy"},
				"sourceType": "Plugin",
				"operationState": map[string]any{"phase": "Succeeded", "startedAt": "2026-12-02T00:00:00Z",
					"operation":  map[string]any{"sync": map[string]any{"revision": commit}},
					"syncResult": map[string]any{"revision": commit, "source": src}},
				"resources": resources,
			},
		}}
		app.SetGroupVersionKind(argoapplier.ApplicationGVK)
		app.SetNamespace(ctl)
		app.SetName(name)
		app.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: sluicev1.GroupVersion.String(), Kind: "Release", Name: name, UID: rel.UID, Controller: ptr.To(true)}})
		must(c.Create(ctx, app))
		keys = append(keys, client.ObjectKeyFromObject(rel))
	}
	return keys
}

// BenchmarkArgoCDDriftPass is one drift pass over 100 releases delivered
// by Argo CD, 20 resources each, nothing drifted: the operator's CPU time
// per pass (this process only) and its writes, which must be 0. The first
// pass, which records the Drifted=False conditions, is made before the
// timer starts.
func BenchmarkArgoCDDriftPass(b *testing.B) {
	const releases, objects = 100, 20
	keys := benchArgoReleases(b, releases, objects)
	cc := &countingClient{Client: env.Client}
	r := &Reconciler{Client: cc, ArgoCD: &ArgoCDChecker{Config: env.Config, Server: argoapplier.InClusterServer}}
	// A failed check is logged (and then written as Drifted=Unknown).
	ctx := log.IntoContext(context.Background(), funcr.New(func(prefix, args string) { b.Log(prefix, args) }, funcr.Options{}))
	pass := func() {
		for _, k := range keys {
			if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: k}); err != nil {
				b.Fatal(err)
			}
		}
	}
	pass()
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
