package manifest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse_environmentSources(t *testing.T) {
	const head = "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: shop\n"
	tests := []struct{ name, body, want string }{
		{"kustomize and manifests, no chart", "environments:\n  - name: a\n    namespace: a\n    kustomize: {path: overlays/a}\n  - name: b\n    namespace: b\n    manifests: {path: m, recurse: true, include: ['*.yaml']}\n", ""},
		{"one environment on the chart needs the chart", "environments:\n  - name: a\n    namespace: a\n    kustomize: {path: overlays/a}\n  - name: b\n    namespace: b\n", "chart needs either path or repo"},
		{"both", "environments:\n  - name: a\n    namespace: a\n    kustomize: {path: k}\n    manifests: {path: m}\n", "not both"},
		{"values with kustomize", "environments:\n  - name: a\n    namespace: a\n    values: [v.yaml]\n    kustomize: {path: k}\n", "values files go with a chart"},
		{"path out", "environments:\n  - name: a\n    namespace: a\n    kustomize: {path: ../k}\n", "must not contain '..'"},
		{"bad glob", "environments:\n  - name: a\n    namespace: a\n    manifests: {path: m, exclude: ['[']}\n", "relative glob"},
		{"unknown field", "environments:\n  - name: a\n    namespace: a\n    manifests: {path: m, recursive: true}\n", "recursive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svc, err := Parse([]byte(head+tt.body), "service.yaml")
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if svc.Environments[0].Source() != SourceKustomize || svc.KustomizeDir("a") != "overlays/a" || svc.ManifestsDir("b") != "m" {
					t.Fatalf("sources: %+v", svc.Environments)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want %q, got %v", tt.want, err)
			}
		})
	}
}

// Argo CD delivers every source through the Sluice plugin, which renders
// what the validator rendered from the approved artifact.
func TestParse_argoCDDeliversEverySource(t *testing.T) {
	const head = "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: shop\n"
	for name, body := range map[string]string{
		"a kustomize overlay":   "environments:\n  - name: a\n    namespace: a\n    delivery: argocd\n    kustomize: {path: k}\n",
		"a manifests folder":    "environments:\n  - name: a\n    namespace: a\n    delivery: argocd\n    manifests: {path: m}\n",
		"a repository chart":    "chart: {repo: oci://registry.example/charts, name: x, version: ~1.0}\nenvironments:\n  - name: a\n    namespace: a\n    delivery: argocd\n",
		"a chart of the folder": "chart: {path: charts/x}\nenvironments:\n  - name: a\n    namespace: a\n    delivery: argocd\n",
	} {
		t.Run(name, func(t *testing.T) {
			svc, err := Parse([]byte(head+body), "service.yaml")
			if err != nil {
				t.Fatal(err)
			}
			if svc.Environments[0].Delivery != DeliveryArgoCD {
				t.Fatalf("delivery %q", svc.Environments[0].Delivery)
			}
		})
	}
}

func TestInputs_kustomizeBasesOutsideTheServiceFolderAreInputs(t *testing.T) {
	root := t.TempDir()
	for name, content := range map[string]string{
		"services/shop/service.yaml":               "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: shop\nenvironments:\n  - name: a\n    namespace: a\n    kustomize: {path: overlay}\n",
		"services/shop/overlay/kustomization.yaml": "resources: [../../../bases/web]\nconfigMapGenerator:\n  - name: c\n    files: [conf=../../../shared/app.conf]\n",
		"bases/web/kustomization.yml":              "resources: [d.yaml]\n",
		"bases/web/d.yaml":                         "kind: X\n",
		"shared/app.conf":                          "x\n",
		"shared/unrelated.txt":                     "y\n",
	} {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(content), 0o644)
	}
	svc, err := Load(root, "services/shop")
	if err != nil {
		t.Fatal(err)
	}
	in, err := svc.Inputs(root)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(in, ","); got != "bases/web,services/shop,shared/app.conf" {
		t.Fatalf("inputs %s", got)
	}
}

func FuzzKustomizeInputs(f *testing.F) {
	f.Add("resources: [a, ../b, /c, https://x/y]\npatches:\n  - path: p.yaml\n")
	f.Add("configMapGenerator:\n  - files: [k=v]\n    env: e\n")
	f.Add("generators:\n  - |\n    kind: X\n")
	f.Fuzz(func(t *testing.T, k string) {
		root := t.TempDir()
		os.WriteFile(filepath.Join(root, "kustomization.yaml"), []byte(k), 0o644)
		in, err := KustomizeInputs(root, ".")
		if err == nil {
			for _, p := range in {
				if strings.HasPrefix(p, "/") || strings.HasPrefix(p, "..") {
					t.Fatalf("input %q leaves the repository", p)
				}
			}
		}
	})
}
