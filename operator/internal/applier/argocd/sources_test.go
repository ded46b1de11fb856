package argocd

// Argo CD delivery of the sources other than a chart folder: a Kustomize
// overlay and a chart from a chart repository, rendered by the Sluice
// plugin from the approved artifact exactly as the validator rendered them.

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
)

// overlayTree is a repository whose service web deploys, in prod, a
// Kustomize overlay whose base lies outside the service folder.
func (f *fixture) overlayTree(greeting string) map[string][]byte {
	return map[string][]byte{
		"services/web/service.yaml": []byte(fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
environments:
  - name: prod
    namespace: %s
    delivery: argocd
    kustomize: {path: overlays/prod}
    approval: {required: 0, autoApproveRisk: low}
`, f.target)),
		"services/web/overlays/prod/kustomization.yaml": []byte("resources: [../../../../bases/web]\nnamePrefix: prod-\nconfigMapGenerator:\n  - name: greeting\n    literals: [greeting=" + greeting + "]\n    options: {disableNameSuffixHash: true}\n"),
		"bases/web/kustomization.yaml":                  []byte("resources: [config.yaml]\n"),
		"bases/web/config.yaml":                         []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  template: '{{ .Values.kept }}'\n"),
	}
}

// overlayDigest is the manifestDigest the validator records for the
// overlay of files: its generated chart rendered offline.
func (f *fixture) overlayDigest(files map[string][]byte) sluicev1.Digest {
	f.t.Helper()
	dir := writeTree(f.t, files)
	svc, err := manifest.Load(dir, "services/web")
	require.NoError(f.t, err)
	ch, err := sources.EnvironmentChart(dir, svc, "prod")
	require.NoError(f.t, err)
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{Loaded: ch, Generated: true, ReleaseName: f.release.Name, Namespace: f.target})
	require.NoError(f.t, err)
	require.NotEmpty(f.t, res.ManifestDigest, "findings: %v", res.Findings)
	return sluicev1.Digest(res.ManifestDigest)
}

func writeTree(t testing.TB, files map[string][]byte) string {
	t.Helper()
	dir := t.TempDir()
	for n, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	return dir
}

// overlayChange pushes the overlay saying greeting and records its change,
// approving the render of approvedGreeting.
func (f *fixture) overlayChange(greeting, approvedGreeting string) *sluicev1.ChangeRequest {
	f.t.Helper()
	files := f.overlayTree(greeting)
	commit := f.git.Commit(files)
	return f.changeFor(commit, files, f.overlayDigest(f.overlayTree(approvedGreeting)), func(cr *sluicev1.ChangeRequest) {
		cr.Spec.Source.Chart = sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/prod"}}
		cr.Spec.Source.Values = nil
	})
}

func (f *fixture) configMap(name string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: name}, cm); err != nil {
		return nil
	}
	return cm
}

func TestArgoCD_aKustomizeOverlayIsSyncedAsTheValidatorRenderedIt(t *testing.T) {
	f := newFixture(t, true)
	f.release.Spec.Chart = sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/prod"}}
	cr := f.overlayChange("hello", "hello")
	res, err := f.apply(cr)
	require.NoError(t, err, argo.Logs())
	require.Contains(t, res.Message, "synced revision "+cr.Spec.Revision[:10]+" and is Healthy")
	cm := f.configMap("prod-web")
	require.NotNil(t, cm, "Argo CD applied the overlay's base")
	require.Equal(t, "{{ .Values.kept }}", cm.Data["template"], "the manifests were delivered as they are, never templated")
	require.Equal(t, "hello", f.configMap("prod-greeting").Data["greeting"])
	src := f.application().Object["spec"].(map[string]any)["source"].(map[string]any)
	require.Equal(t, map[string]any{"name": PluginName}, src["plugin"], "rendered by the Sluice plugin, not by Argo CD's Kustomize")
	require.Nil(t, src["kustomize"])

	// The next change is synced over it.
	_, err = f.apply(f.overlayChange("bye", "bye"))
	require.NoError(t, err, argo.Logs())
	require.Equal(t, "bye", f.configMap("prod-greeting").Data["greeting"])
}

func TestArgoCD_anOverlayBuildingOtherThanTheApprovedDigestSyncsNothing(t *testing.T) {
	f := newFixture(t, true)
	_, err := f.apply(f.overlayChange("not approved", "approved"))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "ManifestMismatch")
	require.Nil(t, f.configMap("prod-greeting"), "nothing synced")
}

// remoteTree is the repository of a service whose chart comes from
// repoURL (what git holds; the syncer adds the fetched chart to the
// artifact).
func (f *fixture) remoteTree(repoURL string) map[string][]byte {
	return map[string][]byte{
		"services/web/service.yaml": []byte(fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {repo: %q, name: web, version: "~1.1"}
values: [values.yaml]
environments:
  - name: prod
    namespace: %s
    delivery: argocd
    approval: {required: 0, autoApproveRisk: low}
`, repoURL, f.target)),
		"services/web/values.yaml": []byte("greeting: from-the-repo\n"),
	}
}

// remoteChange pushes the repository of a service on chart c and records
// the change approving approved (its version, digest and render) while
// the artifact carries c, as the syncer packs it.
func (f *fixture) remoteChange(repoURL string, c, approved *chartrepo.Chart) *sluicev1.ChangeRequest {
	f.t.Helper()
	files := f.remoteTree(repoURL)
	commit := f.git.Commit(files)
	ch, err := chartrepo.Load(approved.TarGz, 0)
	require.NoError(f.t, err)
	values := filepath.Join(writeTree(f.t, files), "services", "web", "values.yaml")
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{Loaded: ch, ValuesFiles: []string{values}, ReleaseName: f.release.Name, Namespace: f.target})
	require.NoError(f.t, err)
	require.NotEmpty(f.t, res.ManifestDigest, "findings: %v", res.Findings)
	fetched, err := sources.RemoteChartFiles(c)
	require.NoError(f.t, err)
	for k, v := range fetched {
		files[k] = v
	}
	return f.changeFor(commit, files, sluicev1.Digest(res.ManifestDigest), func(cr *sluicev1.ChangeRequest) {
		cr.Spec.Source.Chart = sluicev1.ChartSource{Repo: approved.Repo, Name: "web", Version: approved.Version, Digest: sluicev1.Digest(approved.Digest)}
		cr.Spec.Source.Values = []sluicev1.RelativePath{"values.yaml"}
	})
}

func TestArgoCD_aChartFromAnOCIRegistryIsSyncedFromTheApprovedBytesWithTheRegistryGone(t *testing.T) {
	f := newFixture(t, true)
	srv, push := chartrepotest.OCIRegistry(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	repoURL := "oci://" + host + "/charts"
	_, err := push.Push(chartrepotest.MarkedChart(t, "1.1.0", "approved"), host+"/charts/web:1.1.0")
	require.NoError(t, err)
	pulled, err := chartrepo.Pull(context.Background(), chartrepo.Ref{Repo: repoURL, Name: "web", Version: "~1.1"}, chartrepo.Options{HTTPClient: srv.Client()})
	require.NoError(t, err)
	f.release.Spec.Chart = sluicev1.ChartSource{Repo: repoURL, Name: "web", Version: pulled.Version, Digest: sluicev1.Digest(pulled.Digest)}
	cr := f.remoteChange(repoURL, pulled, pulled)

	// The tag moves, then the registry goes away: the plugin renders the
	// approved bytes from the artifact and fetches nothing.
	_, err = push.Push(chartrepotest.MarkedChart(t, "1.1.0", "moved"), host+"/charts/web:1.1.0")
	require.NoError(t, err)
	srv.Close()

	res, err := f.apply(cr)
	require.NoError(t, err, argo.Logs())
	require.Contains(t, res.Message, "synced revision "+cr.Spec.Revision[:10]+" and is Healthy")
	cm := f.configMap(f.release.Name + "-remote")
	require.NotNil(t, cm, "Argo CD applied the chart")
	require.Equal(t, "approved", cm.Data["marker"])
	require.Equal(t, "from-the-repo", cm.Data["greeting"], "the repository's values apply to the chart")
}

// The plugin's render step on its own (a pure step on a content folder):
// each way the content can differ from what was approved is refused.
func TestRenderApproved_refusesContentThatIsNotWhatWasApproved(t *testing.T) {
	const ns = "web-prod"
	repoURL := "https://charts.example/stable"
	httpChart := func(marker string) *chartrepo.Chart {
		tgz := chartrepotest.MarkedChart(t, "1.1.0", marker)
		return &chartrepo.Chart{Resolved: chartrepo.Resolved{Repo: repoURL, Name: "web", Version: "1.1.0", Digest: chartrepo.Digest(tgz)}, TarGz: tgz}
	}
	good, evil := httpChart("approved"), httpChart("evil")
	f := &fixture{t: t, target: ns}
	content := func(c *chartrepo.Chart, delivery string) string {
		files := f.remoteTree(repoURL)
		if delivery != "argocd" {
			files["services/web/service.yaml"] = []byte(strings.Replace(string(files["services/web/service.yaml"]), "delivery: argocd", "delivery: "+delivery, 1))
		}
		fetched, err := sources.RemoteChartFiles(c)
		require.NoError(t, err)
		for k, v := range fetched {
			files[k] = v
		}
		return writeTree(t, files)
	}
	change := func() *sluicev1.ChangeRequest {
		return &sluicev1.ChangeRequest{Spec: sluicev1.ChangeRequestSpec{
			Release: "web-prod", Revision: appliertest.RandomSHA(), TargetNamespace: ns, Delivery: sluicev1.DeliveryArgoCD,
			ManifestDigest: sluicev1.Digest("sha256:" + strings.Repeat("0", 64)),
			Source: &sluicev1.ChangeSource{Service: "web", Environment: "prod", Path: "services/web",
				Chart:  sluicev1.ChartSource{Repo: repoURL, Name: "web", Version: "1.1.0", Digest: sluicev1.Digest(good.Digest)},
				Values: []sluicev1.RelativePath{"values.yaml"}},
		}}
	}
	tests := []struct {
		name, reason, want string
		dir                string
		edit               func(*sluicev1.ChangeRequest)
	}{
		{name: "the artifact holds another chart than the approved digest", dir: content(evil, "argocd"),
			reason: sluicev1.ReasonChartMismatch, want: "the change approved 1.1.0"},
		{name: "the content delivers the environment by helm", dir: content(good, "helm"),
			reason: sluicev1.ReasonInvalidSpec, want: `delivered by "helm", not argocd`},
		{name: "the change names another chart", dir: content(good, "argocd"), edit: func(cr *sluicev1.ChangeRequest) { cr.Spec.Source.Chart.Name = "other" },
			reason: sluicev1.ReasonInvalidSpec, want: "differs from the change's other"},
		{name: "the chart renders other than the approved manifestDigest", dir: content(good, "argocd"),
			want: helmcheck.ErrManifestMismatch.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cr := change()
			if tt.edit != nil {
				tt.edit(cr)
			}
			_, err := renderApproved(context.Background(), tt.dir, cr, "")
			require.Error(t, err)
			require.Contains(t, err.Error(), tt.want)
			if tt.reason != "" {
				fail, ok := applier.AsFailure(err)
				require.True(t, ok, "%v", err)
				require.Equal(t, tt.reason, fail.Reason)
			}
			require.NotContains(t, err.Error(), tt.dir, "names repository paths only")
		})
	}
}

// inflatingTree is overlayTree's overlay, in the Release's namespace,
// inflating chart web from repoURL at version (an exact version or a
// range) as release cache, with the entry's values file saying greeting:
// what git holds.
func (f *fixture) inflatingTree(repoURL, version, greeting string) map[string][]byte {
	files := f.overlayTree("hello")
	files["services/web/overlays/prod/kustomization.yaml"] = []byte(fmt.Sprintf("resources: [../../../../bases/web]\nnamespace: %s\nnamePrefix: prod-\nhelmCharts:\n  - name: web\n    repo: %s\n    version: %q\n    releaseName: cache\n    valuesFile: chart-values.yaml\n", f.target, repoURL, version))
	files["services/web/overlays/prod/chart-values.yaml"] = []byte("greeting: " + greeting + "\n")
	return files
}

// withInflated adds to files (a tree of inflatingTree) the chart fetched
// for each helmCharts entry the overlay reaches, as the syncer packs the
// artifact (.sluice/kustomize-charts/<key>/): c, which must be in the
// entry's range. It returns the fetched charts as the change records them.
func (f *fixture) withInflated(files map[string][]byte, c *chartrepo.Chart) []sluicev1.ChartSource {
	f.t.Helper()
	entries := manifest.KustomizeHelmCharts(writeTree(f.t, files), "services/web/overlays/prod")
	require.Len(f.t, entries, 1)
	var recorded []sluicev1.ChartSource
	for _, e := range entries {
		require.NoError(f.t, sources.CheckResolved(manifest.Chart{Repo: e.Repo, Name: e.Name, Version: e.Version}, &c.Resolved))
		fetched, err := sources.KustomizeChartFiles(e.HelmChart, c)
		require.NoError(f.t, err)
		for k, v := range fetched {
			files[k] = v
		}
		recorded = append(recorded, sluicev1.ChartSource{Repo: c.Repo, Name: c.Name, Version: c.Version, Digest: sluicev1.Digest(c.Digest)})
	}
	return recorded
}

// inflatingChange pushes the inflating overlay saying greeting and records
// its change as the syncer does: c, the chart its entry (range ~1.1)
// resolved to, fetched into the artifact and recorded in
// spec.source.helmCharts, and the validator's render approved.
func (f *fixture) inflatingChange(repoURL, greeting string, c *chartrepo.Chart) *sluicev1.ChangeRequest {
	f.t.Helper()
	files := f.inflatingTree(repoURL, "~1.1", greeting)
	commit := f.git.Commit(files)
	recorded := f.withInflated(files, c)
	return f.changeFor(commit, files, f.overlayDigest(files), func(cr *sluicev1.ChangeRequest) {
		cr.Spec.Source.Chart = sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/prod"}}
		cr.Spec.Source.HelmCharts = recorded
		cr.Spec.Source.Values = nil
	})
}

// A real Argo CD syncs an overlay inflating a chart from an OCI registry
// from the bytes the syncer fetched into the approved artifact, rendered
// by the Sluice plugin as the validator rendered them (the entry's values,
// the overlay's namespace and prefix); after the tag moved and the
// registry went away, the next change is synced from the approved bytes
// still.
func TestArgoCD_anOverlayInflatingAChartIsSyncedFromTheApprovedBytes(t *testing.T) {
	f := newFixture(t, true)
	f.release.Spec.Chart = sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/prod"}}
	srv, push := chartrepotest.OCIRegistry(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	repoURL := "oci://" + host + "/charts"
	_, err := push.Push(chartrepotest.MarkedChart(t, "1.1.0", "approved"), host+"/charts/web:1.1.0")
	require.NoError(t, err)
	ref := chartrepo.Ref{Repo: repoURL, Name: "web", Version: "~1.1"}
	opts := chartrepo.Options{HTTPClient: srv.Client()}
	pulled, err := chartrepo.Pull(context.Background(), ref, opts)
	require.NoError(t, err)

	synced := func(cr *sluicev1.ChangeRequest, greeting string) {
		t.Helper()
		res, err := f.apply(cr)
		require.NoError(t, err, argo.Logs())
		require.Contains(t, res.Message, "synced revision "+cr.Spec.Revision[:10]+" and is Healthy")
		cm := f.configMap("prod-cache-remote")
		require.NotNil(t, cm, "Argo CD applied the inflated chart, named with the overlay's prefix")
		require.Equal(t, f.target, cm.Namespace)
		require.Equal(t, "approved", cm.Data["marker"], "the approved chart's bytes")
		require.Equal(t, greeting, cm.Data["greeting"], "the entry's values apply to the chart")
		require.NotNil(t, f.configMap("prod-web"), "the overlay's own resources too")
	}
	synced(f.inflatingChange(repoURL, "first", pulled), "first")
	src := f.application().Object["spec"].(map[string]any)["source"].(map[string]any)
	require.Equal(t, map[string]any{"name": PluginName}, src["plugin"], "rendered by the Sluice plugin, not by Argo CD's Kustomize")

	// The tag moves, then the registry goes away. The next change's
	// artifact holds the chart the syncer had fetched by its digest: the
	// plugin renders those bytes and fetches nothing.
	_, err = push.Push(chartrepotest.MarkedChart(t, "1.1.0", "moved"), host+"/charts/web:1.1.0")
	require.NoError(t, err)
	moved, err := chartrepo.Resolve(context.Background(), ref, opts)
	require.NoError(t, err)
	require.NotEqual(t, pulled.Digest, moved.Digest)
	srv.Close()
	synced(f.inflatingChange(repoURL, "second", pulled), "second")
}

// The plugin's render step on its own: an overlay whose helmCharts entry's
// chart the syncer fetched into the artifact renders, from those bytes,
// the objects the validator approved; the chart's bytes swapped in the
// content render nothing.
func TestRenderApproved_anOverlayInflatingAChartRendersFromTheFetchedBytes(t *testing.T) {
	const ns = "web-prod"
	repoURL := "https://charts.example/stable"
	entry := manifest.HelmChart{Repo: repoURL, Name: "web", Version: "1.1.0"}
	f := &fixture{t: t, target: ns, release: &sluicev1.Release{}}
	f.release.Name = "web-prod"
	tree := func(marker string) map[string][]byte {
		files := f.inflatingTree(repoURL, entry.Version, "hello")
		tgz := chartrepotest.MarkedChart(t, "1.1.0", marker)
		f.withInflated(files, &chartrepo.Chart{Resolved: chartrepo.Resolved{Repo: repoURL, Name: "web", Version: "1.1.0", Digest: chartrepo.Digest(tgz)}, TarGz: tgz})
		return files
	}
	good := tree("approved")
	cr := &sluicev1.ChangeRequest{Spec: sluicev1.ChangeRequestSpec{
		Release: "web-prod", Revision: appliertest.RandomSHA(), TargetNamespace: ns, Delivery: sluicev1.DeliveryArgoCD,
		ManifestDigest: f.overlayDigest(good),
		Source: &sluicev1.ChangeSource{Service: "web", Environment: "prod", Path: "services/web",
			Chart: sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/prod"}}},
	}}
	out, err := renderApproved(context.Background(), writeTree(t, good), cr, "")
	require.NoError(t, err)
	require.Contains(t, out, "name: prod-cache-remote")
	require.Contains(t, out, "marker: approved")

	// Other bytes under the approved chart's record: refused before
	// anything renders.
	evil := tree("approved")
	evil[path.Join(entry.Root(), sources.RemoteChartFile)] = chartrepotest.MarkedChart(t, "1.1.0", "evil")
	dir := writeTree(t, evil)
	_, err = renderApproved(context.Background(), dir, cr, "")
	require.Error(t, err)
	require.Contains(t, err.Error(), chartrepo.ErrDigestMismatch.Error())
	require.NotContains(t, err.Error(), dir)
}
