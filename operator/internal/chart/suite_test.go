package chart_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/admission"
	"github.com/sluice-gitops/sluice/operator/internal/applier/helm"
)

// controlNS is a control namespace: where a Repository keeps its Releases,
// ChangeRequests, Approvals and plan Secrets.
const controlNS = "team-a"

// installValues are the values the tests install the chart with: both
// components serve controlNS, so the chart binds their Secret and state
// rights there and nowhere else; with argocd.enabled, Argo CD is in
// argocd.
const installValues = "operator: {watchNamespaces: [" + controlNS + "]}\nsyncer: {watchNamespaces: [" + controlNS + "]}\nargocd: {enabled: true}\n"

// How long tests wait for the API server to catch up with a write (RBAC and
// admission are read through informers), and how often they look.
const (
	defaultWait = 2 * time.Minute
	pollEvery   = 100 * time.Millisecond
)

var (
	env *testenv.Env
	// syncerCfg and operatorCfg authenticate with real tokens of the
	// chart's ServiceAccounts, so only the chart's RBAC applies to them.
	syncerCfg, operatorCfg *rest.Config
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, setup) }

// setup readies the control plane for the tests: the chart installed, its
// admission policies in force, and the components' ServiceAccount configs.
func setup(e *testenv.Env) error {
	env = e
	var err error
	// Generous: on a busy machine the chart and its policies take a while;
	// a healthy set-up returns as soon as it is ready.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := installChart(ctx); err != nil {
		return err
	}
	// The policies take effect only once the API server has read them and
	// their parameter object; from then on they deny what they must.
	if err := admission.WaitActive(ctx, env.Config, env.Scheme, admission.Params{Namespace: releaseNS, Syncer: syncerSA, Operator: operatorSA}); err != nil {
		return err
	}
	// A chart whose RBAC lacks these rights must fail the tests that say
	// so, not TestMain: wait a bounded while, then go on.
	rbacCtx, rbacCancel := context.WithTimeout(ctx, time.Minute)
	if err := waitForRBAC(rbacCtx); err != nil {
		fmt.Fprintln(os.Stderr, "chart tests: going on without:", err)
	}
	rbacCancel()
	if syncerCfg, err = serviceAccountConfig(ctx, syncerSA); err != nil {
		return err
	}
	if operatorCfg, err = serviceAccountConfig(ctx, operatorSA); err != nil {
		return err
	}
	return nil
}

// installChart installs the chart from its folder with the Helm v3 SDK, as
// `helm install sluice charts/sluice -n sluice-chart` would, and checks that
// every object the render tests looked at is in the cluster. The CRDs of
// crds/ are already there (testenv installs operator/api/crds, which the
// drift test keeps identical); Helm leaves existing CRDs alone.
func installChart(ctx context.Context) error {
	if err := env.CreateNamespaces(ctx, releaseNS, controlNS, "argocd"); err != nil {
		return err
	}
	ch, err := loader.Load(chartDir)
	if err != nil {
		return fmt.Errorf("load chart: %w", err)
	}
	getter, err := helm.NewRESTClientGetter(env.Config, releaseNS)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	kc := kube.New(getter)
	kc.Namespace = releaseNS
	// The envtest kube-apiserver, built from the module proxy without
	// version stamping, reports v0.0.0; pin what it really is.
	caps := chartutil.DefaultCapabilities.Copy()
	kv, err := chartutil.ParseKubeVersion(testenv.KubernetesVersion)
	if err != nil {
		return err
	}
	caps.KubeVersion = *kv
	cfg := &action.Configuration{
		Capabilities:     caps,
		RESTClientGetter: getter,
		KubeClient:       kc,
		Releases:         storage.Init(driver.NewSecrets(cs.CoreV1().Secrets(releaseNS))),
		Log:              func(string, ...any) {},
	}
	install := action.NewInstall(cfg)
	install.ReleaseName = releaseName
	install.Namespace = releaseNS
	install.Timeout = time.Minute
	vals, err := chartutil.ReadValues([]byte(installValues))
	if err != nil {
		return err
	}
	rel, err := install.RunWithContext(ctx, ch, vals.AsMap())
	if err != nil {
		return fmt.Errorf("helm install: %w", err)
	}
	if rel.Info.Status != release.StatusDeployed {
		return fmt.Errorf("helm install: release is %s", rel.Info.Status)
	}

	r := renderChart(failer{}, installValues)
	if d := r.denies(); len(d) > 0 {
		return fmt.Errorf("the chart has deny findings: %v", d)
	}
	for _, obj := range r.objects {
		live := obj.DeepCopyObject().(client.Object)
		if err := env.Client.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
			return fmt.Errorf("after helm install, %T %s: %w", obj, client.ObjectKeyFromObject(obj), err)
		}
	}
	return nil
}

// waitForRBAC returns once the API server's authorizer knows the chart's
// bindings: both ServiceAccounts may do their first job.
func waitForRBAC(ctx context.Context) error {
	checks := map[types.NamespacedName]authorizationv1.ResourceAttributes{
		syncerSA:   {Namespace: controlNS, Verb: "create", Group: sluicev1.GroupVersion.Group, Resource: "changerequests"},
		operatorSA: {Namespace: controlNS, Verb: "impersonate", Resource: "serviceaccounts"},
	}
	for sa, attrs := range checks {
		for {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: admission.ServiceAccountUsername(sa), Groups: admission.ServiceAccountGroups(sa), ResourceAttributes: &attrs,
			}}
			if err := env.Client.Create(ctx, sar); err != nil {
				return err
			}
			if sar.Status.Allowed {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("RBAC of %s not effective: %w", sa, ctx.Err())
			case <-time.After(pollEvery):
			}
		}
	}
	return nil
}

// serviceAccountConfig returns a rest.Config that authenticates with a
// fresh token of the ServiceAccount (TokenRequest), as the pod would.
func serviceAccountConfig(ctx context.Context, sa types.NamespacedName) (*rest.Config, error) {
	cs, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		return nil, err
	}
	tr, err := cs.CoreV1().ServiceAccounts(sa.Namespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptrTo(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for %s: %w", sa, err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	return cfg, nil
}

func ptrTo[T any](v T) *T { return &v }

// failer lets the render helpers run in TestMain, where there is no
// *testing.T: the first failure panics with its message.
type failer struct{ testing.TB }

func (failer) Helper() {}
func (failer) Errorf(format string, args ...any) {
	panic(fmt.Sprintf(format, args...))
}
func (failer) FailNow() { panic("render failed") }
