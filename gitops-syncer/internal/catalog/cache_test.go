package catalog_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
)

// The cache answers a tree whose skeleton is the same (only values,
// templates or other files' content changed) with the entries of the last
// one, and discovers again on every change Discover can see: a manifest, a
// Terraform file, a kustomization, a name, a folder, a symlink, the
// services path. What a caller does to the entries it got never reaches
// the cache.
func TestCache_answersOnlyTheSameSkeleton(t *testing.T) {
	root := t.TempDir()
	write(t, root, "charts/service/Chart.yaml", "apiVersion: v2\nname: service\nversion: 0.1.0\n")
	write(t, root, "charts/service/templates/cm.yaml", "kind: ConfigMap\n")
	write(t, root, "services/web/service.yaml", header+"name: web\nchart: {path: charts/service}\nvalues: [values.yaml]\nenvironments:\n  - name: staging\n    namespace: web-staging\n")
	write(t, root, "services/web/values.yaml", "tag: 1\n")
	write(t, root, "services/db/service.yaml", header+"name: db\nchart: {path: charts/service}\nterraform: {dir: terraform}\nenvironments:\n  - name: prod\n    namespace: db-prod\n")
	write(t, root, "services/db/terraform/main.tf", "resource \"terraform_data\" \"x\" {}\n")
	write(t, root, "services/_modules/queue/main.tf", "resource \"terraform_data\" \"q\" {}\n")

	var c catalog.Cache
	scratch := t.TempDir()
	hits := c.Hits()
	discover := func(servicesPath string) map[string]catalog.Entry {
		t.Helper()
		entries, err := c.Discover("ns/infra/catalog-", os.DirFS(root), servicesPath, scratch, "catalog-")
		require.NoError(t, err)
		byDir := map[string]catalog.Entry{}
		for _, e := range entries {
			byDir[e.Dir] = e
		}
		left, err := os.ReadDir(scratch)
		require.NoError(t, err)
		assert.Empty(t, left, "no skeleton is left behind")
		return byDir
	}
	expectHit := func(hit bool, what string) {
		t.Helper()
		if hit {
			assert.Equal(t, hits+1, c.Hits(), "%s: answered from the cache", what)
		} else {
			assert.Equal(t, hits, c.Hits(), "%s: discovered again", what)
		}
		hits = c.Hits()
	}

	first := discover("services")
	expectHit(false, "first tree")
	require.Len(t, first, 2)
	assert.Equal(t, []string{"charts/service", "services/db"}, first["services/db"].Inputs)

	// Values and template content: same skeleton.
	write(t, root, "services/web/values.yaml", "tag: 2\n")
	write(t, root, "charts/service/templates/cm.yaml", "kind: ConfigMap\nmetadata: {}\n")
	again := discover("services")
	expectHit(true, "values and templates changed")
	assert.Equal(t, first, again)

	// A caller changing its copy changes nothing cached.
	again["services/db"].Inputs[0] = "mutated"
	again["services/web"].Releases["staging"].Paths[0] = "mutated"
	clean := discover("services")
	expectHit(true, "after a caller changed its copy")
	assert.Equal(t, "charts/service", clean["services/db"].Inputs[0])
	assert.NotEqual(t, "mutated", clean["services/web"].Releases["staging"].Paths[0])

	// A Terraform file now using a module: new inputs.
	write(t, root, "services/db/terraform/main.tf", "module \"q\" {\n  source = \"../../_modules/queue\"\n}\n")
	got := discover("services")
	expectHit(false, "a .tf file changed")
	assert.Equal(t, []string{"charts/service", "services/_modules/queue", "services/db"}, got["services/db"].Inputs)

	// A manifest: a new environment.
	write(t, root, "services/web/service.yaml", header+"name: web\nchart: {path: charts/service}\nvalues: [values.yaml]\nenvironments:\n  - name: staging\n    namespace: web-staging\n  - name: prod\n    namespace: web-prod\n")
	got = discover("services")
	expectHit(false, "service.yaml changed")
	assert.Len(t, got["services/web"].Releases, 2)

	// A new file name (even empty of meaning) and a new folder.
	write(t, root, "services/web/extra.yaml", "x: 1\n")
	discover("services")
	expectHit(false, "a file added")
	require.NoError(t, os.Mkdir(filepath.Join(root, "services/empty"), 0o755))
	discover("services")
	expectHit(false, "a folder added")

	// A symlink, then the same symlink pointing elsewhere.
	require.NoError(t, os.Symlink("../_modules/queue", filepath.Join(root, "services/web/link")))
	discover("services")
	expectHit(false, "a symlink added")
	require.NoError(t, os.Remove(filepath.Join(root, "services/web/link")))
	require.NoError(t, os.Symlink("../../charts", filepath.Join(root, "services/web/link")))
	discover("services")
	expectHit(false, "a symlink's target changed")

	// A service folder renamed: the manifest moved.
	require.NoError(t, os.Rename(filepath.Join(root, "services/db"), filepath.Join(root, "services/database")))
	got = discover("services")
	expectHit(false, "a folder renamed")
	assert.Contains(t, got, "services/database")
	assert.NotContains(t, got, "services/db")

	// Another services path over the same tree.
	write(t, root, "other/api/service.yaml", header+"name: api\nchart: {path: charts/service}\nenvironments:\n  - name: prod\n    namespace: api-prod\n")
	discover("services")
	expectHit(false, "a file added under another folder")
	got = discover("other")
	expectHit(false, "another services path")
	assert.Contains(t, got, "other/api")

	// Errors are not cached: a missing services folder is asked again.
	for range 2 {
		_, err := c.Discover("ns/infra/catalog-", os.DirFS(root), "missing", scratch, "catalog-")
		assert.ErrorIs(t, err, catalog.ErrNoServicesPath)
	}
	expectHit(false, "an error")

	// Forget drops the owner's entries.
	discover("services")
	c.Forget(func(owner string) bool { return owner == "ns/infra/catalog-" })
	discover("services")
	expectHit(false, "after Forget")
}
