package validate

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// reachRepo writes a checkout whose service "checkout" deploys its staging
// environment to checkout-staging with a chart that renders extra.
func reachRepo(t *testing.T, extra string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"charts/app/Chart.yaml":            "apiVersion: v2\nname: app\nversion: 0.1.0\n",
		"charts/app/templates/config.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  a: b\n",
		"charts/app/templates/extra.yaml":  extra,
		"services/checkout/values.yaml":    "{}\n",
		"services/checkout/service.yaml":   "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: checkout\nchart: {path: charts/app}\nvalues: [values.yaml]\nenvironments:\n  - name: staging\n    namespace: checkout-staging\n  - name: prod\n    namespace: checkout-prod\n",
	}
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCheckService_aStagingChartReachingIntoProdOrTheClusterIsDenied(t *testing.T) {
	v := newValidator(t)
	const prodObject = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: planted\n  namespace: checkout-prod\ndata:\n  a: b\n"
	const clusterAdmin = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: planted\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n  - kind: ServiceAccount\n    name: default\n    namespace: checkout-staging\n"
	tests := []struct {
		name     string
		extra    string
		confine  helmcheck.Confinement
		resource string // "" means no helm.namespace finding
	}{
		{"an object for checkout-prod", prodObject, helmcheck.Confinement{}, "ConfigMap/checkout-prod/planted"},
		{"a ClusterRoleBinding", clusterAdmin, helmcheck.Confinement{}, "ClusterRoleBinding/planted"},
		{"checkout-prod allowed by the Repository", prodObject, helmcheck.Confinement{ExtraNamespaces: []string{"checkout-prod"}}, ""},
		{"ClusterRoleBinding allowed by the Repository", clusterAdmin,
			helmcheck.Confinement{ClusterKinds: []schema.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := v.CheckService(context.Background(), ServiceRequest{
				RepoRoot: reachRepo(t, tt.extra), ServiceDir: "services/checkout", Environment: "staging", Confine: tt.confine,
			})
			if err != nil {
				t.Fatal(err)
			}
			var found *report.Finding
			for i, f := range res.Verdict.Findings {
				if f.Policy == "helm.namespace" {
					found = &res.Verdict.Findings[i]
				}
			}
			if tt.resource == "" {
				if found != nil {
					t.Fatalf("an allowed object was denied: %+v", *found)
				}
				return
			}
			if found == nil || found.Severity != report.SeverityDeny || found.Resource != tt.resource || found.File != "charts/app/templates/extra.yaml" {
				t.Fatalf("want a helm.namespace deny for %s in charts/app/templates/extra.yaml, got %+v", tt.resource, res.Verdict.Findings)
			}
			if res.Verdict.Result != report.ResultFail {
				t.Errorf("verdict %s, want fail", res.Verdict.Result)
			}
		})
	}
}
