package helm

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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo/chartrepotest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
)

// overlayTree is an artifact whose "web" service deploys, in staging, a
// Kustomize overlay whose base lives outside the service folder.
func (f *fixture) overlayTree(greeting string) map[string][]byte {
	return map[string][]byte{
		"services/web/service.yaml": []byte(fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
environments:
  - name: staging
    namespace: %s
    kustomize: {path: overlays/staging}
    approval: {required: 0, autoApproveRisk: low}
`, f.target)),
		"services/web/overlays/staging/kustomization.yaml": []byte("resources: [../../../../bases/web]\nnamePrefix: staging-\nconfigMapGenerator:\n  - name: greeting\n    literals: [greeting=" + greeting + "]\n    options: {disableNameSuffixHash: true}\n"),
		"bases/web/kustomization.yaml":                     []byte("resources: [config.yaml]\n"),
		"bases/web/config.yaml":                            []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  template: '{{ .Values.kept }}'\n"),
	}
}

// generatedDigest is the manifestDigest the validator records for an
// overlay: its generated chart (sources.EnvironmentChart) rendered offline.
func generatedDigest(t testing.TB, files map[string][]byte, name, ns string) sluicev1.Digest {
	t.Helper()
	dir := t.TempDir()
	for n, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	svc, err := manifest.Load(dir, "services/web")
	require.NoError(t, err)
	ch, err := sources.EnvironmentChart(dir, svc, "staging")
	require.NoError(t, err)
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{Loaded: ch, Generated: true, ReleaseName: name, Namespace: ns})
	require.NoError(t, err)
	require.NotEmpty(t, res.ManifestDigest, "findings: %v", res.Findings)
	return sluicev1.Digest(res.ManifestDigest)
}

func (f *fixture) overlayChange(greeting, approvedGreeting string) *sluicev1.ChangeRequest {
	f.t.Helper()
	files := f.overlayTree(greeting)
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	commit := appliertest.RandomSHA()
	url := server.Put(f.ctl+"/"+commit+".tar.gz", gz)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, commit, 1), Namespace: f.ctl},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: commit, Attempt: 1, TargetNamespace: f.target, Delivery: sluicev1.DeliveryHelm,
			Source: &sluicev1.ChangeSource{
				Service: "web", Environment: "staging", Path: "services/web",
				Chart: sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/staging"}},
			},
			Artifact:       sluicev1.ArtifactReference{URL: url, SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: generatedDigest(f.t, f.overlayTree(approvedGreeting), f.release.Name, f.target),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	return cr
}

func TestApply_aKustomizeOverlayIsInstalledAsTheValidatorRenderedIt(t *testing.T) {
	f := newFixture(t)
	f.release.Spec.Chart = sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/staging"}}
	f.release.Spec.Values = nil

	res, err := f.apply(f.overlayChange("hello", "hello"))
	require.NoError(t, err)
	require.Equal(t, int32(1), res.HelmRevision)
	var cm corev1.ConfigMap
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: "staging-web"}, &cm))
	require.Equal(t, "{{ .Values.kept }}", cm.Data["template"], "the manifests were installed as they are, never templated")
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: "staging-greeting"}, &cm))
	require.Equal(t, "hello", cm.Data["greeting"])

	// An upgrade is Helm revision two, with Helm's history for drift,
	// audit and rollback as for any chart.
	res, err = f.apply(f.overlayChange("bye", "bye"))
	require.NoError(t, err)
	require.Equal(t, int32(2), res.HelmRevision)
	require.Len(t, f.helmHistory(), 2)
}

func TestApply_anOverlayBuildingOtherThanTheApprovedDigestInstallsNothing(t *testing.T) {
	f := newFixture(t)
	_, err := f.apply(f.overlayChange("not approved", "approved"))
	appliertest.RequireFailure(t, err, sluicev1.ReasonManifestMismatch)
	f.requireNothingInstalled()
}

// TestApply_anOverlayWithAFetchedRemoteBaseIsInstalledFromTheArtifact: the
// remote base the syncer fetched into the artifact (.sluice/remote) is what
// the Helm applier builds; nothing is cloned at apply.
func TestApply_anOverlayWithAFetchedRemoteBaseIsInstalledFromTheArtifact(t *testing.T) {
	f := newFixture(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	url := "https://git.example/platform/bases.git//web?ref=" + commit
	rb, err := manifest.ParseRemoteBase(url)
	require.NoError(t, err)
	files := f.overlayTree("hello")
	files["services/web/overlays/staging/kustomization.yaml"] = []byte("resources:\n  - " + url + "\nnamePrefix: staging-\n")
	files[rb.Target()+"/kustomization.yaml"] = []byte("resources: [cm.yaml]\n")
	files[rb.Target()+"/cm.yaml"] = []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: remote\ndata:\n  from: the-pinned-commit\n")
	tb := artifacttest.Tarball(files)
	gz := artifacttest.Gzip(tb)
	rev := appliertest.RandomSHA()
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, rev, 1), Namespace: f.ctl},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Revision: rev, Attempt: 1, TargetNamespace: f.target, Delivery: sluicev1.DeliveryHelm,
			Source: &sluicev1.ChangeSource{Service: "web", Environment: "staging", Path: "services/web",
				Chart: sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/staging"}}},
			Artifact:       sluicev1.ArtifactReference{URL: server.Put(f.ctl+"/"+rev+".tar.gz", gz), SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: generatedDigest(t, files, f.release.Name, f.target),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	_, err = f.apply(cr)
	require.NoError(t, err)
	var cm corev1.ConfigMap
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: "staging-remote"}, &cm))
	require.Equal(t, "the-pinned-commit", cm.Data["from"])
}

// TestApply_anOverlayInflatingAChartIsInstalledFromTheApprovedBytesEvenAfterItsTagMoved:
// a helmCharts entry's chart, fetched by the syncer into the artifact
// (.sluice/kustomize-charts), is rendered with the Helm SDK from those
// bytes by the Helm applier as by the validator; the registry's tag moved
// after the approval changes nothing, and an artifact whose chart is not
// the bytes its record names installs nothing.
func TestApply_anOverlayInflatingAChartIsInstalledFromTheApprovedBytesEvenAfterItsTagMoved(t *testing.T) {
	srv, push := chartrepotest.OCIRegistry(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	repoURL := "oci://" + host + "/charts"
	_, err := push.Push(chartrepotest.MarkedChart(t, "1.1.0", "approved"), host+"/charts/web:1.1.0")
	require.NoError(t, err)
	opts := chartrepo.Options{HTTPClient: srv.Client()}
	approved, err := chartrepo.Pull(context.Background(), chartrepo.Ref{Repo: repoURL, Name: "web", Version: "~1.1"}, opts)
	require.NoError(t, err)
	entry := manifest.HelmChart{Repo: repoURL, Name: "web", Version: "~1.1"}
	tree := func(f *fixture, c *chartrepo.Chart) map[string][]byte {
		files := f.overlayTree("hello")
		files["services/web/overlays/staging/kustomization.yaml"] = []byte(fmt.Sprintf(
			"resources: [../../../../bases/web]\nnamePrefix: staging-\nhelmCharts:\n  - name: web\n    repo: %s\n    version: \"~1.1\"\n    releaseName: cache\n    valuesFile: chart-values.yaml\n", repoURL))
		files["services/web/overlays/staging/chart-values.yaml"] = []byte("greeting: from-the-overlay\n")
		fetched, err := sources.KustomizeChartFiles(entry, c)
		require.NoError(t, err)
		for k, v := range fetched {
			files[k] = v
		}
		return files
	}
	change := func(f *fixture, files map[string][]byte, digest sluicev1.Digest) *sluicev1.ChangeRequest {
		tb := artifacttest.Tarball(files)
		gz := artifacttest.Gzip(tb)
		rev := appliertest.RandomSHA()
		cr := &sluicev1.ChangeRequest{
			ObjectMeta: metav1.ObjectMeta{Name: sluicev1.ChangeRequestName(f.release.Name, rev, 1), Namespace: f.ctl},
			Spec: sluicev1.ChangeRequestSpec{
				Release: f.release.Name, Revision: rev, Attempt: 1, TargetNamespace: f.target, Delivery: sluicev1.DeliveryHelm,
				Source: &sluicev1.ChangeSource{Service: "web", Environment: "staging", Path: "services/web",
					Chart:      sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/web/overlays/staging"}},
					HelmCharts: []sluicev1.ChartSource{{Repo: repoURL, Name: "web", Version: approved.Version, Digest: sluicev1.Digest(approved.Digest)}}},
				Artifact:       sluicev1.ArtifactReference{URL: server.Put(f.ctl+"/"+rev+".tar.gz", gz), SHA256: sluicev1.SHA256Digest(gz)},
				ContentDigest:  sluicev1.SHA256Digest(tb),
				ManifestDigest: digest,
				Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
			},
		}
		cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
		return cr
	}

	t.Run("installed from the approved bytes", func(t *testing.T) {
		f := newFixture(t)
		files := tree(f, approved)
		cr := change(f, files, generatedDigest(t, files, f.release.Name, f.target))
		// The tag moves after the approval.
		_, err := push.Push(chartrepotest.MarkedChart(t, "1.1.0", "moved"), host+"/charts/web:1.1.0")
		require.NoError(t, err)
		moved, err := chartrepo.Resolve(context.Background(), chartrepo.Ref{Repo: repoURL, Name: "web", Version: "~1.1"}, opts)
		require.NoError(t, err)
		require.NotEqual(t, approved.Digest, moved.Digest)

		_, err = f.apply(cr)
		require.NoError(t, err)
		var cm corev1.ConfigMap
		require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: "staging-cache-remote"}, &cm))
		require.Equal(t, "approved", cm.Data["marker"])
		require.Equal(t, "from-the-overlay", cm.Data["greeting"], "the overlay's valuesFile applies to the chart")
		require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: "staging-web"}, &cm), "the overlay's own resources too")
	})
	t.Run("other bytes than the recorded digest install nothing", func(t *testing.T) {
		f := newFixture(t)
		files := tree(f, approved)
		digest := generatedDigest(t, files, f.release.Name, f.target)
		files[path.Join(entry.Root(), sources.RemoteChartFile)] = chartrepotest.MarkedChart(t, "1.1.0", "evil")
		_, err := f.apply(change(f, files, digest))
		appliertest.RequireFailure(t, err, sluicev1.ReasonInvalidSpec)
		f.requireNothingInstalled()
	})
}
