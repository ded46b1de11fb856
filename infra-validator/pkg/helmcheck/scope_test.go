package helmcheck

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// reach renders testdata/charts/reach as release "web" in "shop-staging"
// with the given values (YAML) and confinement.
func reach(t *testing.T, values string, conf *Confinement, previous string) *Result {
	t.Helper()
	f := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(f, []byte(values), 0o600); err != nil {
		t.Fatal(err)
	}
	return render(t, Options{Chart: filepath.Join(charts, "reach"), ValuesFiles: []string{f},
		Namespace: "shop-staging", Confine: conf, Previous: previous})
}

// namespaceDenies lists the helm.namespace deny findings as "resource file".
func namespaceDenies(r *Result) []string {
	var out []string
	for _, f := range r.Findings {
		if f.Policy == "helm.namespace" && f.Severity == report.SeverityDeny {
			out = append(out, f.Resource+" "+f.File)
		}
	}
	return out
}

func TestRender_objectsOutsideTheReleaseNamespaceAreDenied(t *testing.T) {
	strict := &Confinement{}
	crb := schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}
	tests := []struct {
		name   string
		values string
		conf   *Confinement
		want   []string
	}{
		{"everything in the target namespace passes", "", strict, nil},
		{"an object for the prod namespace in a staging chart", "foreign: shop-prod\n", strict,
			[]string{"ConfigMap/shop-prod/web-elsewhere templates/foreign.yaml"}},
		{"an object naming the target namespace itself passes", "foreign: shop-staging\n", strict, nil},
		{"another namespace the Repository allows by glob", "foreign: shop-shared\n", &Confinement{ExtraNamespaces: []string{"shop-sh*"}}, nil},
		{"a ClusterRoleBinding", "clusterRoleBinding: true\n", strict,
			[]string{"ClusterRoleBinding/web-admin templates/crb.yaml"}},
		{"a ClusterRoleBinding the Repository allows by kind", "clusterRoleBinding: true\n", &Confinement{ClusterKinds: []schema.GroupKind{crb}}, nil},
		{"a kind of the same name in another group is not allowed by it", "widget: true\n", &Confinement{ClusterKinds: []schema.GroupKind{{Group: "other.example.com", Kind: "Widget"}}},
			[]string{"Widget/shop-staging/web templates/widget.yaml"}},
		{"a custom kind of unknown scope", "widget: true\n", strict, []string{"Widget/shop-staging/web templates/widget.yaml"}},
		{"a custom kind the Repository accepts", "widget: true\n", &Confinement{ClusterKinds: []schema.GroupKind{{Group: "example.com", Kind: "Widget"}}}, nil},
		{"a List hiding a ClusterRoleBinding", "list: true\n", &Confinement{ClusterKinds: []schema.GroupKind{crb}},
			[]string{"List/shop-staging/ templates/list.yaml"}},
		{"a hook in another namespace", "hook: true\nhookNamespace: shop-prod\n", strict,
			[]string{"Job/shop-prod/web-migrate templates/hook.yaml"}},
		{"no confinement: a bare chart lint", "foreign: shop-prod\nclusterRoleBinding: true\n", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := reach(t, tt.values, tt.conf, "")
			got := namespaceDenies(r)
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("helm.namespace denies %q, want %q (findings %+v)", got, tt.want, r.Findings)
			}
		})
	}
}

func TestConfinement_checkSaysWhy(t *testing.T) {
	err := Confinement{}.Check(schema.GroupKind{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}, ScopeCluster, "", "shop", "ClusterRoleBinding x")
	if err == nil || !strings.Contains(err.Error(), "allowedClusterKinds does not list ClusterRoleBinding.rbac.authorization.k8s.io") {
		t.Errorf("err %v", err)
	}
	err = Confinement{}.Check(schema.GroupKind{Kind: "ConfigMap"}, ScopeNamespaced, "prod", "shop", "ConfigMap x")
	if err == nil || !strings.Contains(err.Error(), "namespace prod, not the release's namespace shop") {
		t.Errorf("err %v", err)
	}
	// An allowed unknown kind is still held to the namespace rule.
	err = Confinement{ClusterKinds: []schema.GroupKind{{Group: "example.com", Kind: "Widget"}}}.Check(
		schema.GroupKind{Group: "example.com", Kind: "Widget"}, ScopeUnknown, "prod", "shop", "Widget x")
	if err == nil {
		t.Error("an allowed kind of unknown scope naming another namespace passed")
	}
}

func TestRender_aNewPreUpgradeJobHookIsAtLeastMediumRisk(t *testing.T) {
	base := reach(t, "", nil, "")
	withHook := reach(t, "hook: true\n", nil, base.Rendered)
	if withHook.Risk != report.RiskMedium || !strings.Contains(strings.Join(withHook.RiskReasons, "\n"), "Job/shop-staging/web-migrate: new hook (pre-upgrade)") {
		t.Errorf("a new pre-upgrade Job hook: risk %s reasons %v", withHook.Risk, withHook.RiskReasons)
	}
	same := reach(t, "hook: true\n", nil, withHook.Rendered)
	if same.Risk != report.RiskLow {
		t.Errorf("an unchanged hook: risk %s reasons %v", same.Risk, same.RiskReasons)
	}
	// A changed image of a hook runs another command: not the low-risk
	// image bump of a Deployment.
	bumped := reach(t, "hook: true\nhookImage: busybox:1.37\n", nil, withHook.Rendered)
	if bumped.Risk != report.RiskMedium || !strings.Contains(strings.Join(bumped.RiskReasons, "\n"), "hook changed") {
		t.Errorf("a changed hook: risk %s reasons %v", bumped.Risk, bumped.RiskReasons)
	}
	// A hook that is gone deletes nothing.
	if gone := reach(t, "", nil, withHook.Rendered); gone.Risk != report.RiskLow {
		t.Errorf("a removed hook: risk %s reasons %v", gone.Risk, gone.RiskReasons)
	}
}

func TestRender_theDigestCoversHooks(t *testing.T) {
	plain := reach(t, "", nil, "")
	if plain.ManifestDigest != ManifestDigest([]byte(plain.Manifest)) {
		t.Error("a chart without hooks: the digest is not that of the post-renderer's bytes")
	}
	hooked := reach(t, "hook: true\n", nil, "")
	if hooked.Manifest != plain.Manifest {
		t.Fatal("the hook changed the post-rendered manifests; the test assumes it does not")
	}
	if hooked.ManifestDigest == plain.ManifestDigest {
		t.Error("a hook does not change the manifestDigest")
	}
	other := reach(t, "hook: true\nhookImage: evil:1\n", nil, "")
	if other.ManifestDigest == hooked.ManifestDigest {
		t.Error("a hook rendering differently has the same manifestDigest")
	}
	if !strings.Contains(hooked.Rendered, "# Source: reach/templates/hook.yaml\n") || strings.Contains(hooked.Manifest, "kind: Job") {
		t.Errorf("Rendered lacks the hook, or Manifest has it:\n%s", hooked.Rendered)
	}

	// A real install (Helm's storage, a fake cluster) stores a release
	// record whose manifest and hooks hash to the validator's digest.
	ch, err := LoadChart(filepath.Join(charts, "reach"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmConfig(t)
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = "web", "shop-staging"
	rel, err := inst.Run(ch, map[string]any{"hook": true})
	if err != nil {
		t.Fatal(err)
	}
	if got := ReleaseDigest([]byte(rel.Manifest), rel.Hooks); got != hooked.ManifestDigest {
		t.Errorf("the release record hashes to %s, the validator's digest is %s", got, hooked.ManifestDigest)
	}
	// An upgrade renders the hooks for an upgrade; this chart's render the
	// same, so the same approval covers it.
	up := action.NewUpgrade(cfg)
	up.Namespace = "shop-staging"
	rel, err = up.Run("web", ch, map[string]any{"hook": true})
	if err != nil {
		t.Fatal(err)
	}
	if got := ReleaseDigest([]byte(rel.Manifest), rel.Hooks); got != hooked.ManifestDigest {
		t.Errorf("the upgrade's release record hashes to %s, the validator's digest is %s", got, hooked.ManifestDigest)
	}
}

func TestKindScope_knowsBuiltInsAndLeavesCustomKindsUnknown(t *testing.T) {
	for gk, want := range map[schema.GroupKind]Scope{
		{Kind: "ConfigMap"}: ScopeNamespaced,
		{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}: ScopeCluster,
		{Group: "rbac.authorization.k8s.io", Kind: "RoleBinding"}:        ScopeNamespaced,
		{Group: "example.com", Kind: "ClusterRoleBinding"}:               ScopeUnknown,
		{Group: "example.com", Kind: "Widget"}:                           ScopeUnknown,
		{Group: "monitoring.coreos.com", Kind: "ServiceMonitor"}:         ScopeNamespaced,
		{Kind: "List"}: ScopeUnknown,
	} {
		if got := KindScope(gk); got != want {
			t.Errorf("%v: scope %v, want %v", gk, got, want)
		}
	}
}
