package preview_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/controller"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
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

// TestPullRequest_anOverlayWithAnAllowedRemoteBaseGetsAPreviewBuiltFromItsPinnedCommit:
// a pull request adding an overlay whose base is a pinned commit of a
// repository the Repository allows gets a preview built from that commit
// (fetched as for a change), not a "not fetched" rejection; the branch of
// that repository moving on changes nothing in it.
func TestPullRequest_anOverlayWithAnAllowedRemoteBaseGetsAPreviewBuiltFromItsPinnedCommit(t *testing.T) {
	platform := gittest.NewRepo(t, t.TempDir(), "platform")
	platform.WriteFile("web/kustomization.yaml", "resources: [config.yaml]\n")
	platform.WriteFile("web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: pinned\n")
	pinned := platform.Commit("bases", "platform@example.com")
	platform.WriteFile("web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: moved\n")
	platform.Commit("moved on", "platform@example.com")

	i := newInfra(t, "")
	i.repo.Spec.KustomizeRemoteBases = []sluicev1.KustomizeRemoteBase{{URL: platform.FileURL()}}
	gc, err := git.NewGoGit(t.TempDir(), git.URLPolicy{AllowFile: true}, nil)
	require.NoError(t, err)
	i.h.Charts = &controller.RepositoryReconciler{Client: k8s, APIReader: k8s, Git: gc}
	head := i.pullRequest(t, 11, i.base, map[string]string{
		"services/web/service.yaml":               "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: web\nenvironments:\n  - name: staging\n    namespace: cart-web\n    kustomize: {path: overlay}\n",
		"services/web/overlay/kustomization.yaml": "resources:\n  - " + platform.FileURL() + "//web?ref=" + pinned + "\nnamePrefix: staging-\n",
	})
	require.NoError(t, i.h.PullRequest(context.Background(), i.repo, githubPR(t, "opened", 11, head, i.base)))
	cr := byRelease(previews(t, i.repo.Namespace, 11))["web-staging"]
	require.NotNil(t, cr)
	require.NotEqual(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result, "%+v", cr.Spec.Verdict.Findings)
	require.NotEmpty(t, cr.Spec.ManifestDigest, "the overlay built from the fetched base")
	tgz, err := i.h.Store.Get(artifact.Key{Namespace: i.repo.Namespace, Repository: i.repo.Name, Revision: head, Release: "web-staging"})
	require.NoError(t, err)
	files := untar(t, tgz)
	var found bool
	for name, data := range files {
		if strings.HasSuffix(name, "/web/config.yaml") && strings.HasPrefix(name, manifest.RemoteBasesDir+"/") {
			found = true
			require.Contains(t, string(data), "color: pinned", "the base at its pinned commit, not the branch head")
		}
	}
	require.True(t, found, "the base is in the preview's artifact: %d files", len(files))
}

// untar returns the files of a .tar.gz by name.
func untar(t *testing.T, tgz []byte) map[string][]byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	require.NoError(t, err)
	tr := tar.NewReader(zr)
	out := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		out[h.Name] = b
	}
}
