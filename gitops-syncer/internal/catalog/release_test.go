package catalog_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
)

const twoEnvs = header + "name: shop\nchart: {path: charts/service}\nvalues: [values.yaml]\nterraform: {dir: terraform}\nenvironments:\n" +
	"  - name: staging\n    namespace: shop-staging\n    values: [values-staging.yaml]\n" +
	"  - name: prod\n    namespace: shop-prod\n    values: [values-prod.yaml]\n    approval: {required: 1}\n"

func shop(t *testing.T, manifest string) map[string]catalog.ReleaseInputs {
	t.Helper()
	root := t.TempDir()
	write(t, root, "charts/service/Chart.yaml", "apiVersion: v2\nname: service\nversion: 0.1.0\n")
	write(t, root, "services/shop/service.yaml", manifest)
	write(t, root, "services/shop/values.yaml", "a: 1\n")
	write(t, root, "services/shop/values-staging.yaml", "b: 1\n")
	write(t, root, "services/shop/common.yaml", "c: 1\n")
	require.NoError(t, os.Symlink("common.yaml", filepath.Join(root, "services/shop/values-prod.yaml")))
	write(t, root, "services/shop/terraform/main.tf", "module \"q\" {\n  source = \"../../_modules/queue\"\n}\n")
	write(t, root, "services/_modules/queue/main.tf", "resource \"terraform_data\" \"q\" {}\n")
	write(t, root, "services/shop/README.md", "read by no release\n")
	entries, err := catalog.Discover(os.DirFS(root), "services", t.TempDir())
	require.NoError(t, err)
	require.Len(t, entries, 1)
	require.NoError(t, entries[0].Err)
	return entries[0].Releases
}

// TestDiscover_aReleaseReadsItsOwnValuesChartAndStack: staging's inputs
// hold its values files, the chart, the stack and its modules, never
// prod's values file or other files of the service folder; a values file
// that is a symlink brings its target.
func TestDiscover_aReleaseReadsItsOwnValuesChartAndStack(t *testing.T) {
	rel := shop(t, twoEnvs)
	assert.Equal(t, []string{"charts/service", "services/_modules/queue", "services/shop/terraform", "services/shop/values-staging.yaml", "services/shop/values.yaml"},
		rel["staging"].Paths)
	assert.Equal(t, []string{"charts/service", "services/_modules/queue", "services/shop/common.yaml", "services/shop/terraform", "services/shop/values-prod.yaml", "services/shop/values.yaml"},
		rel["prod"].Paths)
}

// TestDiscover_anEnvironmentsEntryIsOnlyItsOwnInput: editing prod's entry
// changes prod's view of service.yaml and not staging's; a shared field
// changes both; formatting changes neither.
func TestDiscover_anEnvironmentsEntryIsOnlyItsOwnInput(t *testing.T) {
	before := shop(t, twoEnvs)
	prodEdit := shop(t, strings.Replace(twoEnvs, "approval: {required: 1}", "approval: {required: 2}", 1))
	assert.Equal(t, before["staging"].View, prodEdit["staging"].View)
	assert.NotEqual(t, before["prod"].View, prodEdit["prod"].View)

	shared := shop(t, strings.Replace(twoEnvs, "values: [values.yaml]", "values: [values.yaml]\nowners: [team-shop]", 1))
	assert.NotEqual(t, before["staging"].View, shared["staging"].View)
	assert.NotEqual(t, before["prod"].View, shared["prod"].View)

	comment := shop(t, "# a comment\n"+twoEnvs)
	assert.Equal(t, before["staging"].View, comment["staging"].View)
	assert.Equal(t, before["prod"].View, comment["prod"].View)
}
