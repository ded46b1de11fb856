package validate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
)

const remoteService = `apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {repo: "https://charts.example/stable", name: web, version: "~1.1"}
values: [values.yaml]
environments:
  - name: staging
    namespace: web-staging
`

// remoteChart packages a chart as a chart repository would serve it.
func remoteChart(t *testing.T, version string) *chartrepo.Chart {
	t.Helper()
	ch := &chart.Chart{
		Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "web", Version: version, Type: "application"},
		Values:   map[string]any{"greeting": "hello"},
		Templates: []*chart.File{{Name: "templates/cm.yaml", Data: []byte(
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n")}},
	}
	p, err := chartutil.Save(ch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tgz, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return &chartrepo.Chart{Resolved: chartrepo.Resolved{Repo: "https://charts.example/stable", Name: "web", Version: version, Digest: chartrepo.Digest(tgz)}, TarGz: tgz}
}

// remoteRepo is a checkout of remoteService with the fetched chart c in
// the content, as the syncer builds the artifact.
func remoteRepo(t *testing.T, c *chartrepo.Chart) string {
	files := map[string]string{
		"services/web/service.yaml": remoteService,
		"services/web/values.yaml":  "greeting: from-the-repo\n",
	}
	if c != nil {
		fetched, err := sources.RemoteChartFiles(c)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range fetched {
			files[k] = string(v)
		}
	}
	return writeTree(t, files)
}

func TestCheckService_chartFromAChartRepositoryRendersTheFetchedBytesWithTheRepositorysValues(t *testing.T) {
	v := newValidator(t)
	root := remoteRepo(t, remoteChart(t, "1.1.3"))
	res, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/web", Environment: "staging"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(res.Chart.Render.Rendered, "greeting: \"from-the-repo\"") {
		t.Fatalf("values from the repository not applied:\n%s", res.Chart.Render.Rendered)
	}
	if res.ManifestDigest == "" {
		t.Fatal("no manifest digest")
	}
}

func TestCheckService_aFetchedChartThatIsNotTheApprovedOneIsRefused(t *testing.T) {
	v := newValidator(t)
	check := func(root string) error {
		_, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/web", Environment: "staging"})
		return err
	}
	good := remoteChart(t, "1.1.3")

	t.Run("other bytes than the digest", func(t *testing.T) {
		root := remoteRepo(t, good)
		other := remoteChart(t, "1.1.3")
		other.TarGz = append(other.TarGz, 0) // a trailing byte: still a valid gzip stream for some readers
		if err := os.WriteFile(filepath.Join(root, sources.RemoteChartDir, sources.RemoteChartFile), other.TarGz, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := check(root); !errors.Is(err, chartrepo.ErrDigestMismatch) {
			t.Fatalf("want a digest mismatch, got %v", err)
		}
	})
	t.Run("a version outside the range", func(t *testing.T) {
		if err := check(remoteRepo(t, remoteChart(t, "1.2.0"))); err == nil || !strings.Contains(err.Error(), `not in the manifest's "~1.1"`) {
			t.Fatalf("want the range refused, got %v", err)
		}
	})
	t.Run("another repository", func(t *testing.T) {
		c := remoteChart(t, "1.1.3")
		c.Repo = "https://evil.example/charts"
		if err := check(remoteRepo(t, c)); err == nil || !strings.Contains(err.Error(), "is not the manifest's") {
			t.Fatalf("want the repository refused, got %v", err)
		}
	})
	t.Run("nothing fetched", func(t *testing.T) {
		if err := check(remoteRepo(t, nil)); !errors.Is(err, ErrChartRepository) {
			t.Fatalf("want ErrChartRepository, got %v", err)
		}
	})
	t.Run("an archive missing beside resolved.json", func(t *testing.T) {
		root := remoteRepo(t, good)
		if err := os.Remove(filepath.Join(root, sources.RemoteChartDir, sources.RemoteChartFile)); err != nil {
			t.Fatal(err)
		}
		// An incomplete fetch, not "nothing fetched": the same error as
		// an inflated chart's (sources.KustomizeChart).
		err := check(root)
		if err == nil || !strings.Contains(err.Error(), "incomplete fetched chart") || errors.Is(err, ErrChartRepository) {
			t.Fatalf("want an incomplete fetch, got %v", err)
		}
	})
	t.Run("a link instead of the archive", func(t *testing.T) {
		root := remoteRepo(t, good)
		p := filepath.Join(root, sources.RemoteChartDir, sources.RemoteChartFile)
		_ = os.Remove(p)
		if err := os.Symlink("/etc/passwd", p); err != nil {
			t.Fatal(err)
		}
		// Refused as the confined path it resolves to (out of the
		// content) before it is read; a link within would be "not a
		// regular file".
		if err := check(root); err == nil || !strings.Contains(err.Error(), "chart.tgz: path leaves the repository") {
			t.Fatalf("want the link refused, got %v", err)
		}
	})
}
