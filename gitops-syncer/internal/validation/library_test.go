package validation_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func write(t *testing.T, root, path, content string) {
	t.Helper()
	full := filepath.Join(root, filepath.FromSlash(path))
	require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
}

func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	require.NoError(t, os.CopyFS(dst, os.DirFS(src)))
}

// Helm-only services need no Terraform state, so no API server either.
func TestLibrary_helmOnlyServicesGetTheLibrarysVerdictAndDigest(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	chart := filepath.Join(filepath.Dir(file), "..", "..", "..", "charts", "service")
	lib, err := validation.NewLibrary(context.Background(), validation.LibraryOptions{})
	require.NoError(t, err)

	for _, tc := range []struct {
		name, values string
		want         sluicev1.VerdictResult
	}{
		{"a pinned image passes", "image:\n  repository: ghcr.io/example/web\n  tag: \"1.2.3\"\n", sluicev1.VerdictPass},
		{"the mutable tag latest fails", "image:\n  repository: ghcr.io/example/web\n  tag: latest\n", sluicev1.VerdictFail},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			copyDir(t, chart, filepath.Join(root, "charts", "service"))
			write(t, root, "services/web/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: web\nchart: {path: charts/service}\nvalues: [values.yaml]\nenvironments:\n  - name: staging\n    namespace: web-staging\n")
			write(t, root, "services/web/values.yaml", tc.values)
			svc, err := manifest.Load(root, "services/web")
			require.NoError(t, err)
			res, err := lib.Validate(context.Background(), validation.Request{RepoRoot: root, Service: svc, Environment: "staging", ControlNamespace: "team", Release: "web-staging"})
			require.NoError(t, err)
			assert.Equal(t, tc.want, res.Verdict.Result, "%+v", res.Verdict)
			assert.True(t, sluicev1.ValidDigest(string(res.ManifestDigest)), res.ManifestDigest)
			assert.Empty(t, res.PlanFile)
		})
	}

	t.Run("a chart repository is a rejected change, not an error", func(t *testing.T) {
		root := t.TempDir()
		write(t, root, "services/web/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: web\nchart: {repo: https://charts.example.com, name: web, version: 1.0.0}\nenvironments:\n  - name: staging\n    namespace: web-staging\n")
		svc, err := manifest.Load(root, "services/web")
		require.NoError(t, err)
		res, err := lib.Validate(context.Background(), validation.Request{RepoRoot: root, Service: svc, Environment: "staging", ControlNamespace: "team", Release: "web-staging"})
		require.NoError(t, err)
		assert.Equal(t, sluicev1.VerdictFail, res.Verdict.Result)
		require.NotEmpty(t, res.Verdict.Findings)
		assert.Equal(t, sluicev1.SeverityDeny, res.Verdict.Findings[0].Severity)
	})
}

// TestLibrary_theRepositorysAllowancesReachTheValidator: a ClusterRoleBinding
// in a chart is a deny finding unless the Repository lists its kind.
func TestLibrary_theRepositorysAllowancesReachTheValidator(t *testing.T) {
	lib, err := validation.NewLibrary(context.Background(), validation.LibraryOptions{})
	require.NoError(t, err)
	root := t.TempDir()
	write(t, root, "charts/app/Chart.yaml", "apiVersion: v2\nname: app\nversion: 0.1.0\n")
	write(t, root, "charts/app/templates/crb.yaml", "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: planted\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: view\nsubjects:\n  - kind: ServiceAccount\n    name: default\n    namespace: web-staging\n")
	write(t, root, "services/web/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: web\nchart: {path: charts/app}\nenvironments:\n  - name: staging\n    namespace: web-staging\n")
	svc, err := manifest.Load(root, "services/web")
	require.NoError(t, err)
	repo := &sluicev1.Repository{}
	req := validation.Request{RepoRoot: root, Service: svc, Environment: "staging", ControlNamespace: "team", Release: "web-staging", Confine: validation.ConfinementOf(repo)}

	res, err := lib.Validate(context.Background(), req)
	require.NoError(t, err)
	assert.Equal(t, sluicev1.VerdictFail, res.Verdict.Result, "%+v", res.Verdict.Findings)

	repo.Spec.AllowedClusterKinds = []sluicev1.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}}
	req.Confine = validation.ConfinementOf(repo)
	res, err = lib.Validate(context.Background(), req)
	require.NoError(t, err)
	for _, f := range res.Verdict.Findings {
		assert.NotEqual(t, "helm.namespace", f.Policy, "%+v", f)
	}
}

// TestLibrary_theChartAndThePlanCheckedSideBySideGiveCheckServicesResult:
// Validate renders the chart while terraform plans; the verdict, digests
// and plan summary are those of the library's serial CheckService.
func TestLibrary_theChartAndThePlanCheckedSideBySideGiveCheckServicesResult(t *testing.T) {
	if _, err := exec.LookPath("terraform"); err != nil {
		t.Fatal("terraform is needed on PATH: ", err)
	}
	_, file, _, _ := runtime.Caller(0)
	chart := filepath.Join(filepath.Dir(file), "..", "..", "..", "charts", "service")
	lib, err := validation.NewLibrary(context.Background(), validation.LibraryOptions{})
	require.NoError(t, err)
	root := t.TempDir()
	copyDir(t, chart, filepath.Join(root, "charts", "service"))
	write(t, root, "services/db/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: db\nchart: {path: charts/service}\nvalues: [values.yaml]\nterraform: {dir: terraform}\nenvironments:\n  - name: staging\n    namespace: db-staging\n    terraform: {vars: {size: small}}\n")
	// The mutable tag is a chart finding; the plan adds its own resources.
	write(t, root, "services/db/values.yaml", "image:\n  repository: ghcr.io/example/db\n  tag: latest\n")
	write(t, root, "services/db/terraform/main.tf", "variable \"size\" {\n  type = string\n}\nresource \"terraform_data\" \"a\" {\n  input = var.size\n}\nresource \"terraform_data\" \"b\" {\n  input = \"b\"\n}\n")
	svc, err := manifest.Load(root, "services/db")
	require.NoError(t, err)

	res, err := lib.Validate(context.Background(), validation.Request{RepoRoot: root, Service: svc, Environment: "staging", ControlNamespace: "team", Release: "db-staging"})
	require.NoError(t, err)
	serial, err := lib.V.CheckService(context.Background(), validate.ServiceRequest{RepoRoot: root, ServiceDir: "services/db", Environment: "staging"})
	require.NoError(t, err)

	assert.Equal(t, string(serial.Verdict.Result), string(res.Verdict.Result))
	assert.Equal(t, string(serial.Verdict.Risk), string(res.Verdict.Risk))
	require.Len(t, res.Verdict.Findings, len(serial.Verdict.Findings))
	for i, f := range serial.Verdict.Findings {
		got := res.Verdict.Findings[i]
		assert.Equal(t, []string{f.Source, f.Policy, f.Message, f.File}, []string{got.Source, got.Policy, got.Message, got.File})
	}
	assert.Equal(t, serial.ManifestDigest, string(res.ManifestDigest))
	assert.Equal(t, serial.PlanDigest, string(res.PlanDigest))
	require.NotNil(t, res.PlanSummary)
	assert.EqualValues(t, 2, res.PlanSummary.Add)
	assert.NotEmpty(t, res.PlanFile)
	assert.Equal(t, sluicev1.VerdictFail, res.Verdict.Result, "the chart's finding survives the merge")
}

// TestLibrary_aManifestProblemComesBeforeAPlanFailure: with a values file
// missing and a stack terraform refuses, the change is rejected for the
// manifest, as when the plan ran after the chart.
func TestLibrary_aManifestProblemComesBeforeAPlanFailure(t *testing.T) {
	lib, err := validation.NewLibrary(context.Background(), validation.LibraryOptions{})
	require.NoError(t, err)
	root := t.TempDir()
	write(t, root, "charts/app/Chart.yaml", "apiVersion: v2\nname: app\nversion: 0.1.0\n")
	write(t, root, "services/db/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: db\nchart: {path: charts/app}\nvalues: [values.yaml]\nterraform: {dir: terraform}\nenvironments:\n  - name: staging\n    namespace: db-staging\n")
	write(t, root, "services/db/terraform/main.tf", "resource \"terraform_data\" \"a\" {\n")
	write(t, root, "services/db/values.yaml", "replicaCount: 1\n")
	svc, err := manifest.Load(root, "services/db")
	require.NoError(t, err)
	require.NoError(t, os.Remove(filepath.Join(root, "services/db/values.yaml")))
	res, err := lib.Validate(context.Background(), validation.Request{RepoRoot: root, Service: svc, Environment: "staging", ControlNamespace: "team", Release: "db-staging"})
	require.NoError(t, err)
	assert.Equal(t, sluicev1.VerdictFail, res.Verdict.Result)
	require.NotEmpty(t, res.Verdict.Findings)
	for _, f := range res.Verdict.Findings {
		assert.NotEqual(t, "terraform", f.Source, "%+v", f)
	}
}
