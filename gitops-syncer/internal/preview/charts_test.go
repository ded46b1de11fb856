package preview_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/controller"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestPullRequest_aServiceWithAChartFromARegistryGetsAPreviewOfTheResolvedChart:
// a pull request adding a service whose chart comes from an OCI registry
// gets a preview rendered from the chart fetched by digest, recording the
// resolved version and digest.
func TestPullRequest_aServiceWithAChartFromARegistryGetsAPreviewOfTheResolvedChart(t *testing.T) {
	srv, push := chartrepotest.OCIRegistry(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: "1.1.0", Type: "application"},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n")}},
	}
	p, err := chartutil.Save(ch, t.TempDir())
	require.NoError(t, err)
	tgz, err := os.ReadFile(p)
	require.NoError(t, err)
	_, err = push.Push(tgz, host+"/charts/web:1.1.0")
	require.NoError(t, err)

	i := newInfra(t, "")
	i.h.Charts = &controller.RepositoryReconciler{Client: k8s, APIReader: k8s, ChartOptions: chartrepo.Options{HTTPClient: srv.Client()}}
	head := i.pullRequest(t, 9, i.base, map[string]string{
		"services/web/service.yaml": fmt.Sprintf("apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: web\nchart: {repo: %q, name: web, version: \"~1.1\"}\nvalues: [values.yaml]\nenvironments:\n  - name: staging\n    namespace: cart-web\n", "oci://"+host+"/charts"),
		"services/web/values.yaml":  "greeting: from-the-pull-request\n",
	})
	require.NoError(t, i.h.PullRequest(context.Background(), i.repo, githubPR(t, "opened", 9, head, i.base)))
	cr := byRelease(previews(t, i.repo.Namespace, 9))["web-staging"]
	require.NotNil(t, cr)
	assert.Equal(t, "1.1.0", cr.Spec.Source.Chart.Version)
	assert.NotEmpty(t, cr.Spec.Source.Chart.Digest)
	assert.NotEmpty(t, cr.Spec.ManifestDigest, "the fetched chart was rendered: %+v", cr.Spec.Verdict.Findings)
	assert.NotEqual(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result, "%+v", cr.Spec.Verdict.Findings)
}
