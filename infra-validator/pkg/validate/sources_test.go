package validate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// writeTree writes files (repo-relative name → content) under a new folder.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
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

const sourcesService = `apiVersion: sluice.dev/v1alpha1
kind: Service
name: shop
environments:
  - name: staging
    namespace: shop-staging
    kustomize: {path: overlays/staging}
  - name: prod
    namespace: shop-prod
    manifests: {path: manifests, recurse: true, include: ["*.yaml", "*.json"], exclude: ["*-test.yaml"]}
`

const deployment = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  replicas: 1\n  selector:\n    matchLabels: {app: web}\n  template:\n    metadata:\n      labels: {app: web}\n    spec:\n      securityContext: {runAsNonRoot: true}\n      containers:\n        - name: web\n          image: nginx:1.27\n          resources:\n            limits: {cpu: 100m, memory: 64Mi}\n            requests: {cpu: 50m, memory: 32Mi}\n"

// sourcesRepo is a checkout with a service deploying a Kustomize overlay
// (whose base lives outside the service folder) in staging and a manifests
// folder in prod; overrides replace or add files.
func sourcesRepo(t *testing.T, overrides map[string]string) string {
	files := map[string]string{
		"bases/web/kustomization.yaml":                      "resources: [deployment.yaml, config.yaml]\n",
		"bases/web/deployment.yaml":                         deployment,
		"bases/web/config.yaml":                             "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  greeting: '{{ not a template }}'\n",
		"services/shop/service.yaml":                        sourcesService,
		"services/shop/overlays/staging/kustomization.yaml": "resources: [../../../../bases/web]\nnamePrefix: staging-\nlabels:\n  - pairs: {env: staging}\n",
		"services/shop/manifests/config.yaml":               "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: prod-config\ndata:\n  a: b\n",
		"services/shop/manifests/sub/secret.json":           `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"from-json"},"data":{"x":"y"}}`,
		"services/shop/manifests/sub/skip-test.yaml":        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: excluded\n",
		"services/shop/manifests/README.md":                 "not a manifest\n",
	}
	for k, v := range overrides {
		files[k] = v
	}
	return writeTree(t, files)
}

func objectIDs(res *ServiceResult) []string {
	var ids []string
	for _, o := range res.Chart.Render.Objects {
		ids = append(ids, o.ID())
	}
	return ids
}

func TestCheckService_kustomizeOverlayIsRenderedAndCheckedLikeAChart(t *testing.T) {
	v := newValidator(t)
	root := sourcesRepo(t, nil)
	// The base, bases/web, is outside the service folder.
	res, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Join(objectIDs(res), ",")
	if ids != "ConfigMap/shop-staging/staging-web,Deployment/shop-staging/staging-web" && ids != "Deployment/shop-staging/staging-web,ConfigMap/shop-staging/staging-web" {
		t.Fatalf("objects %s", ids)
	}
	if !strings.HasPrefix(res.ManifestDigest, "sha256:") {
		t.Fatalf("no manifest digest: %q", res.ManifestDigest)
	}
	if !strings.Contains(res.Chart.Render.Manifest, "{{ not a template }}") {
		t.Errorf("the manifest content went through the template engine:\n%s", res.Chart.Render.Manifest)
	}
	if res.Verdict.Result == report.ResultFail {
		t.Fatalf("verdict fail: %+v", res.Verdict.Findings)
	}
	again, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
	if err != nil || again.ManifestDigest != res.ManifestDigest {
		t.Fatalf("the digest is not stable: %v %s %s", err, again.ManifestDigest, res.ManifestDigest)
	}
}

func TestCheckService_manifestsFolderHonoursRecurseIncludeAndExclude(t *testing.T) {
	v := newValidator(t)
	root := sourcesRepo(t, nil)
	res, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	ids := strings.Join(objectIDs(res), ",")
	if !strings.Contains(ids, "ConfigMap/shop-prod/prod-config") || !strings.Contains(ids, "ConfigMap/shop-prod/from-json") || strings.Contains(ids, "excluded") {
		t.Fatalf("objects %s", ids)
	}
	if res.ManifestDigest == "" {
		t.Fatal("no digest")
	}
	// Findings name the repository file, not the generated template.
	root2 := sourcesRepo(t, map[string]string{"services/shop/manifests/other.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: elsewhere\n  namespace: kube-system\n"})
	res, err = v.CheckService(context.Background(), ServiceRequest{RepoRoot: root2, ServiceDir: "services/shop", Environment: "prod"})
	if err != nil {
		t.Fatal(err)
	}
	if !hasAt(res.Verdict.Findings, "helm.namespace", "services/shop/manifests/other.yaml") {
		t.Fatalf("want a helm.namespace deny in services/shop/manifests/other.yaml, got %+v", res.Verdict.Findings)
	}
}

func hasAt(fs []report.Finding, policy, file string) bool {
	for _, f := range fs {
		if f.Policy == policy && f.File == file && f.Severity == report.SeverityDeny {
			return true
		}
	}
	return false
}

// An overlay that moves its objects into another namespace, with the
// kustomization's namespace field or with a patch, is denied exactly as a
// chart template doing so is.
func TestCheckService_overlayPlacingObjectsInAnotherNamespaceIsDenied(t *testing.T) {
	v := newValidator(t)
	for name, k := range map[string]string{
		"namespace field": "resources: [../../../../bases/web]\nnamespace: kube-system\n",
		"a patch":         "resources: [../../../../bases/web]\npatches:\n  - target: {kind: ConfigMap}\n    patch: |-\n      - op: add\n        path: /metadata/namespace\n        value: shop-prod\n",
	} {
		t.Run(name, func(t *testing.T) {
			root := sourcesRepo(t, map[string]string{"services/shop/overlays/staging/kustomization.yaml": k})
			res, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
			if err != nil {
				t.Fatal(err)
			}
			if !hasAt(res.Verdict.Findings, "helm.namespace", "services/shop/overlays/staging/kustomization.yaml") || res.Verdict.Result != report.ResultFail {
				t.Fatalf("want a helm.namespace deny, got %s %+v", res.Verdict.Result, res.Verdict.Findings)
			}
		})
	}
}

func TestCheckService_hostileOverlaysAreRefusedWithFileAndLine(t *testing.T) {
	v := newValidator(t)
	const k = "services/shop/overlays/staging/kustomization.yaml"
	tests := []struct {
		name, kustomization, want string
		line                      int
		setup                     func(t *testing.T, root string)
	}{
		{name: "a path out of the repository", kustomization: "resources:\n  - ../../../etc\n  - ../../../../../../../etc\n", want: "leaves the repository", line: 3},
		{name: "an absolute path", kustomization: "resources:\n  - /etc/passwd\n", want: "absolute path", line: 2},
		{name: "a remote base", kustomization: "resources:\n  - https://github.com/kubernetes-sigs/kustomize//examples/helloWorld?ref=v5.0.0\n", want: "remote base", line: 2},
		{name: "a git remote base", kustomization: "resources:\n  - github.com/org/repo/base?ref=main\n", want: "remote base", line: 2},
		{name: "a helmCharts entry whose chart is not fetched", kustomization: "helmCharts:\n  - name: nginx\n    repo: https://charts.example\n    version: 1.0.0\n    releaseName: x\n", want: "it is not fetched", line: 2},
		{name: "an exec plugin", kustomization: "resources: [../../../../bases/web]\ntransformers:\n  - plugin.yaml\n", want: "exec", line: 3,
			setup: func(t *testing.T, root string) {
				os.WriteFile(filepath.Join(root, "services/shop/overlays/staging/plugin.yaml"),
					[]byte("apiVersion: example.com/v1\nkind: Evil\nmetadata:\n  name: x\n  annotations:\n    config.kubernetes.io/function: |\n      exec:\n        path: /bin/sh\n"), 0o644)
			}},
		{name: "a container plugin", kustomization: "generators:\n  - |\n    apiVersion: example.com/v1\n    kind: Evil\n    metadata:\n      name: x\n      annotations:\n        config.kubernetes.io/function: '{container: {image: evil}}'\n", want: "KRM function", line: 2},
		{name: "a symlink out of the repository", kustomization: "resources: [leak]\n", want: "symlink", line: 1,
			setup: func(t *testing.T, root string) {
				outside := t.TempDir()
				os.WriteFile(filepath.Join(outside, "kustomization.yaml"), []byte("resources: [x.yaml]\n"), 0o644)
				if err := os.Symlink(outside, filepath.Join(root, "services/shop/overlays/staging/leak")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a patch file through a symlink out", kustomization: "resources: [../../../../bases/web]\npatches:\n  - path: passwd\n", want: "symlink", line: 3,
			setup: func(t *testing.T, root string) {
				if err := os.Symlink("/etc/passwd", filepath.Join(root, "services/shop/overlays/staging/passwd")); err != nil {
					t.Fatal(err)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := sourcesRepo(t, map[string]string{k: tt.kustomization})
			if tt.setup != nil {
				tt.setup(t, root)
			}
			_, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
			var me *manifest.Error
			if !errors.As(err, &me) {
				t.Fatalf("want a *manifest.Error, got %v", err)
			}
			for _, p := range me.Problems {
				if p.File == k && p.Line == tt.line && strings.Contains(p.Message, tt.want) {
					if strings.Contains(err.Error(), root) {
						t.Errorf("the error names a machine path: %v", err)
					}
					return
				}
			}
			t.Fatalf("want %s:%d: …%s…, got %v", k, tt.line, tt.want, err)
		})
	}
}

func TestCheckService_badManifestsFolders(t *testing.T) {
	v := newValidator(t)
	t.Run("a symlinked manifest out of the repository", func(t *testing.T) {
		root := sourcesRepo(t, nil)
		if err := os.Symlink("/etc/hostname", filepath.Join(root, "services/shop/manifests/leak.yaml")); err != nil {
			t.Fatal(err)
		}
		_, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "prod"})
		if err == nil || !strings.Contains(err.Error(), "services/shop/manifests/leak.yaml") || !strings.Contains(err.Error(), "leaves the repository") {
			t.Fatalf("want the symlink refused, got %v", err)
		}
	})
	t.Run("nothing selected", func(t *testing.T) {
		root := sourcesRepo(t, map[string]string{"services/shop/service.yaml": strings.Replace(sourcesService, `include: ["*.yaml", "*.json"]`, `include: ["*.yml"]`, 1)})
		_, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "prod"})
		if err == nil || !strings.Contains(err.Error(), "holds no") {
			t.Fatalf("want an empty selection refused, got %v", err)
		}
	})
	t.Run("a manifest that is not YAML is a deny finding", func(t *testing.T) {
		root := sourcesRepo(t, map[string]string{"services/shop/manifests/bad.yaml": "kind: [unclosed\n"})
		res, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "prod"})
		if err != nil {
			if strings.Contains(err.Error(), "bad.yaml") {
				return
			}
			t.Fatal(err)
		}
		if res.Verdict.Result != report.ResultFail {
			t.Fatalf("want fail, got %+v", res.Verdict)
		}
	})
}
