package helm

import (
	"context"
	"fmt"
	"os"
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
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
)

// remoteTree is an artifact of a service whose chart comes from repoURL,
// with the fetched chart c in it as the syncer puts it there.
func (f *fixture) remoteTree(repoURL string, c *chartrepo.Chart) map[string][]byte {
	files := map[string][]byte{
		"services/web/service.yaml": []byte(fmt.Sprintf(`apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {repo: %q, name: web, version: "~1.1"}
values: [values.yaml]
environments:
  - name: staging
    namespace: %s
    approval: {required: 0, autoApproveRisk: low}
`, repoURL, f.target)),
		"services/web/values.yaml": []byte("greeting: from-the-repo\n"),
	}
	fetched, err := sources.RemoteChartFiles(c)
	require.NoError(f.t, err)
	for k, v := range fetched {
		files[k] = v
	}
	return files
}

// remoteChange is the ChangeRequest approving chart approved (its
// version, digest and render) while the artifact carries files.
func (f *fixture) remoteChange(files map[string][]byte, approved *chartrepo.Chart) *sluicev1.ChangeRequest {
	f.t.Helper()
	ch, err := chartrepo.Load(approved.TarGz, 0)
	require.NoError(f.t, err)
	dir := f.t.TempDir()
	values := filepath.Join(dir, "values.yaml")
	require.NoError(f.t, os.WriteFile(values, files["services/web/values.yaml"], 0o644))
	res, err := helmcheck.Render(context.Background(), helmcheck.Options{Loaded: ch, Chart: "web", ValuesFiles: []string{values}, ReleaseName: f.release.Name, Namespace: f.target})
	require.NoError(f.t, err)
	require.NotEmpty(f.t, res.ManifestDigest, "findings: %v", res.Findings)
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
				Chart:  sluicev1.ChartSource{Repo: approved.Repo, Name: "web", Version: approved.Version, Digest: sluicev1.Digest(approved.Digest)},
				Values: []sluicev1.RelativePath{"values.yaml"},
			},
			Artifact:       sluicev1.ArtifactReference{URL: url, SHA256: sluicev1.SHA256Digest(gz)},
			ContentDigest:  sluicev1.SHA256Digest(tb),
			ManifestDigest: sluicev1.Digest(res.ManifestDigest),
			Verdict:        sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskLow},
		},
	}
	cr.Spec.ApprovalDigest = cr.ExpectedApprovalDigest()
	return cr
}

func TestApply_aChartFromAnOCIRegistryIsInstalledFromTheApprovedBytesEvenAfterItsTagMoved(t *testing.T) {
	f := newFixture(t)
	srv, push := chartrepotest.OCIRegistry(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	repoURL := "oci://" + host + "/charts"
	_, err := push.Push(chartrepotest.MarkedChart(t, "1.1.0", "approved"), host+"/charts/web:1.1.0")
	require.NoError(t, err)
	opts := chartrepo.Options{HTTPClient: srv.Client()}
	approved, err := chartrepo.Pull(context.Background(), chartrepo.Ref{Repo: repoURL, Name: "web", Version: "~1.1"}, opts)
	require.NoError(t, err)
	cr := f.remoteChange(f.remoteTree(repoURL, approved), approved)

	// The tag moves after the approval: nothing approved changes.
	_, err = push.Push(chartrepotest.MarkedChart(t, "1.1.0", "moved"), host+"/charts/web:1.1.0")
	require.NoError(t, err)
	moved, err := chartrepo.Resolve(context.Background(), chartrepo.Ref{Repo: repoURL, Name: "web", Version: "~1.1"}, opts)
	require.NoError(t, err)
	require.NotEqual(t, approved.Digest, moved.Digest)

	res, err := f.apply(cr)
	require.NoError(t, err)
	require.Equal(t, int32(1), res.HelmRevision)
	var cm corev1.ConfigMap
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: f.release.Name + "-remote"}, &cm))
	require.Equal(t, "approved", cm.Data["marker"])
	require.Equal(t, "from-the-repo", cm.Data["greeting"], "the repository's values apply to the remote chart")
}

func TestApply_aRemoteChartWithOtherBytesThanTheApprovedDigestInstallsNothing(t *testing.T) {
	repoURL := "https://charts.example/stable"
	httpChart := func(marker string) *chartrepo.Chart {
		tgz := chartrepotest.MarkedChart(t, "1.1.0", marker)
		return &chartrepo.Chart{Resolved: chartrepo.Resolved{Repo: repoURL, Name: "web", Version: "1.1.0", Digest: chartrepo.Digest(tgz)}, TarGz: tgz}
	}
	approved, evil := httpChart("approved"), httpChart("evil")

	t.Run("the content names other bytes than the change", func(t *testing.T) {
		f := newFixture(t)
		// A consistent artifact of another chart under the approved
		// change's version: the change's digest tells them apart.
		cr := f.remoteChange(f.remoteTree(repoURL, evil), approved)
		_, err := f.apply(cr)
		appliertest.RequireFailure(t, err, sluicev1.ReasonChartMismatch)
		f.requireNothingInstalled()
	})
	t.Run("the archive is not the bytes its record names", func(t *testing.T) {
		f := newFixture(t)
		files := f.remoteTree(repoURL, approved)
		files[sources.RemoteChartDir+"/"+sources.RemoteChartFile] = evil.TarGz
		_, err := f.apply(f.remoteChange(files, approved))
		appliertest.RequireFailure(t, err, sluicev1.ReasonChartMismatch)
		f.requireNothingInstalled()
	})
}
