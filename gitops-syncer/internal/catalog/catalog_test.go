package catalog_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

func write(t *testing.T, root, path, content string) {
	t.Helper()
	full := filepath.Join(root, filepath.FromSlash(path))
	require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
	require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
}

const header = "apiVersion: sluice.dev/v1alpha1\nkind: Service\n"

func TestDiscover_listsServicesWithTheirInputs(t *testing.T) {
	root := t.TempDir()
	write(t, root, "charts/service/Chart.yaml", "apiVersion: v2\nname: service\nversion: 0.1.0\n")
	write(t, root, "services/web/service.yaml", header+"name: web\nchart: {path: charts/service}\nenvironments:\n  - name: staging\n    namespace: web-staging\n")
	write(t, root, "services/db/service.yaml", header+"name: db\nchart: {path: charts/service}\nterraform: {dir: terraform}\nenvironments:\n  - name: prod\n    namespace: db-prod\n")
	write(t, root, "services/db/terraform/main.tf", "module \"q\" {\n  source = \"../../_modules/queue\"\n}\n")
	write(t, root, "services/_modules/queue/main.tf", "resource \"terraform_data\" \"q\" {}\n")
	write(t, root, "services/broken/service.yaml", header+"name: broken\nnope: 1\n")
	write(t, root, "services/README.md", "not a service\n")

	entries, err := catalog.Discover(os.DirFS(root), "services", t.TempDir())
	require.NoError(t, err)
	byDir := map[string]catalog.Entry{}
	for _, e := range entries {
		byDir[e.Dir] = e
	}
	require.Len(t, byDir, 3, "folders without service.yaml are not services")
	assert.Equal(t, []string{"charts/service", "services/web"}, byDir["services/web"].Inputs)
	assert.Equal(t, []string{"charts/service", "services/_modules/queue", "services/db"}, byDir["services/db"].Inputs)
	var merr *manifest.Error
	require.True(t, errors.As(byDir["services/broken"].Err, &merr), "%v", byDir["services/broken"].Err)
	assert.Nil(t, byDir["services/broken"].Service)

	_, err = catalog.Discover(os.DirFS(root), "elsewhere", t.TempDir())
	assert.ErrorIs(t, err, catalog.ErrNoServicesPath)
}

func TestDiscover_refusesModulesLeavingTheRepository(t *testing.T) {
	root := t.TempDir()
	write(t, root, "services/db/service.yaml", header+"name: db\nchart: {repo: https://charts.example.com, name: x, version: 1.0.0}\nterraform: {dir: terraform}\nenvironments:\n  - name: prod\n    namespace: db-prod\n")
	write(t, root, "services/db/terraform/main.tf", "module \"q\" {\n  source = \"../../../../outside\"\n}\n")
	entries, err := catalog.Discover(os.DirFS(root), "services", t.TempDir())
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Error(t, entries[0].Err)
}

// TestDiscover_aStackThatDoesNotParseKeepsItsService: the release can
// still be named and validated (terraform reports the syntax error in a
// ChangeRequest); its inputs fall back to the service, chart and
// Terraform folders.
func TestDiscover_aStackThatDoesNotParseKeepsItsService(t *testing.T) {
	root := t.TempDir()
	write(t, root, "charts/service/Chart.yaml", "apiVersion: v2\nname: service\nversion: 0.1.0\n")
	write(t, root, "services/db/service.yaml", header+"name: db\nchart: {path: charts/service}\nterraform: {dir: terraform}\nenvironments:\n  - name: prod\n    namespace: db-prod\n")
	write(t, root, "services/db/terraform/main.tf", "resource \"terraform_data\" \"q\" {\n")
	entries, err := catalog.Discover(os.DirFS(root), "services", t.TempDir())
	require.NoError(t, err)
	require.Len(t, entries, 1)
	e := entries[0]
	require.NoError(t, e.Err)
	require.NotNil(t, e.Service)
	assert.ErrorContains(t, e.InputsErr, "main.tf")
	assert.Equal(t, []string{"charts/service", "services/db"}, e.Inputs)
}
