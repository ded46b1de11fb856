package validate

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
)

const inflateKustomization = "services/shop/overlays/staging/kustomization.yaml"

// inflateEntry is the helmCharts entry of the tests: chart web ~1.1 from
// the chart repository of remoteChart.
var inflateEntry = manifest.HelmChart{Repo: "https://charts.example/stable", Name: "web", Version: "~1.1"}

// inflateRepo is sourcesRepo with kustomization as the staging overlay
// and, when c is set, c fetched for inflateEntry as the syncer puts it
// into the artifact.
func inflateRepo(t *testing.T, kustomization string, c *chartrepo.Chart, extra map[string]string) string {
	t.Helper()
	files := map[string]string{inflateKustomization: kustomization}
	for k, v := range extra {
		files[k] = v
	}
	if c != nil {
		fetched, err := sources.KustomizeChartFiles(inflateEntry, c)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range fetched {
			files[k] = string(v)
		}
	}
	return sourcesRepo(t, files)
}

const inflateOverlay = `resources: [../../../../bases/web]
namePrefix: staging-
helmCharts:
  - name: web
    repo: https://charts.example/stable
    version: "~1.1"
    releaseName: cache
    valuesFile: chart-values.yaml
    valuesInline: {greeting: inline}
`

func TestCheckService_aHelmChartOfAnOverlayIsRenderedFromTheFetchedBytes(t *testing.T) {
	v := newValidator(t)
	c := remoteChart(t, "1.1.2")
	root := inflateRepo(t, inflateOverlay, c, map[string]string{"services/shop/overlays/staging/chart-values.yaml": "greeting: from-file\nother: x\n"})
	res, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
	if err != nil {
		t.Fatal(err)
	}
	ids := objectIDs(res)
	for _, want := range []string{"Deployment/shop-staging/staging-web", "ConfigMap/shop-staging/staging-cache"} {
		if !slices.Contains(ids, want) {
			t.Fatalf("want %s (the chart rendered as release cache, then the overlay's prefix and namespace), got %v", want, ids)
		}
	}
	if !strings.Contains(res.Chart.Render.Manifest, `greeting: inline`) {
		t.Fatalf("valuesInline overrides valuesFile as with Kustomize: %s", res.Chart.Render.Manifest)
	}
	in, err := manifest.KustomizeInputs(root, "services/shop/overlays/staging")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(in, inflateEntry.Root()) || !slices.Contains(in, "services/shop/overlays/staging") {
		t.Fatalf("the fetched chart is an input (so in the artifact and its digest): %v", in)
	}
	// The same content renders the same digest (the Helm applier and the
	// Argo CD plugin build through the same function).
	again, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
	if err != nil || again.ManifestDigest != res.ManifestDigest {
		t.Fatalf("a second build: %v, digest %s vs %s", err, again.ManifestDigest, res.ManifestDigest)
	}

	t.Run("other bytes than the recorded digest are refused", func(t *testing.T) {
		p := filepath.Join(root, inflateEntry.Root(), sources.RemoteChartFile)
		other := remoteChart(t, "1.1.2")
		other.TarGz = append([]byte(nil), other.TarGz...)
		other.TarGz[len(other.TarGz)/2] ^= 1
		if err := os.WriteFile(p, other.TarGz, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
		if !errors.Is(err, chartrepo.ErrDigestMismatch) && (err == nil || !strings.Contains(err.Error(), chartrepo.ErrDigestMismatch.Error())) {
			t.Fatalf("want the digest mismatch, got %v", err)
		}
	})
	t.Run("a fetched version outside the entry's range is refused", func(t *testing.T) {
		root := inflateRepo(t, inflateOverlay, remoteChart(t, "1.2.0"), map[string]string{"services/shop/overlays/staging/chart-values.yaml": "{}\n"})
		_, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
		if err == nil || !strings.Contains(err.Error(), `not in the manifest's "~1.1"`) {
			t.Fatalf("want the version refused, got %v", err)
		}
	})
}

func TestCheckService_helmChartsThatCannotBeInflatedAreRefusedWithFileAndLine(t *testing.T) {
	v := newValidator(t)
	c := remoteChart(t, "1.1.2")
	entry := "helmCharts:\n  - name: web\n    repo: https://charts.example/stable\n    version: \"~1.1\"\n    releaseName: cache\n"
	tests := []struct {
		name, kustomization, want string
		line                      int
		notFetched                bool
		setup                     func(t *testing.T, root string)
	}{
		{name: "a repository the Repository does not allow (so not fetched)", kustomization: entry, notFetched: true, want: "spec.chartRepositories", line: 2},
		{name: "a repository of another host", kustomization: strings.Replace(entry, "charts.example/stable", "evil.example/x", 1), want: "it is not fetched", line: 2},
		{name: "an entry with no version", kustomization: "helmCharts:\n  - name: web\n    repo: https://charts.example/stable\n    releaseName: cache\n", want: "version is required", line: 2},
		{name: "an entry with no repo (a chart of chartHome)", kustomization: "helmCharts:\n  - name: web\n    version: 1.0.0\n    releaseName: cache\n", want: "never from a chartHome", line: 2},
		{name: "helmGlobals.chartHome", kustomization: entry + "helmGlobals:\n  chartHome: ../../../../../outside\n", want: "helmGlobals is refused", line: 6},
		{name: "a values file out of the repository", kustomization: entry + "    valuesFile: ../../../../../../etc/passwd\n", want: "leaves the repository", line: 6},
		{name: "an absolute values file", kustomization: entry + "    additionalValuesFiles: [/etc/passwd]\n", want: "absolute path", line: 6},
		{name: "a values file through a symlink out", kustomization: entry + "    valuesFile: leak.yaml\n", want: "symlink", line: 6,
			setup: func(t *testing.T, root string) {
				if err := os.Symlink("/etc/passwd", filepath.Join(root, "services/shop/overlays/staging/leak.yaml")); err != nil {
					t.Fatal(err)
				}
			}},
		{name: "a range that is not one", kustomization: strings.Replace(entry, `"~1.1"`, "latest", 1), want: "semver range", line: 4},
		{name: "credentials in the repo URL", kustomization: strings.Replace(entry, "https://", "https://u:p@", 1), want: "must not carry credentials", line: 3},
		{name: "no release name", kustomization: strings.Replace(entry, "    releaseName: cache\n", "", 1), want: "releaseName is required", line: 2},
		{name: "an unsupported field", kustomization: entry + "    nameTemplate: x\n", want: `"nameTemplate" is not supported`, line: 6},
		{name: "a HelmChartInflationGenerator", kustomization: "generators:\n  - |\n    apiVersion: builtin\n    kind: HelmChartInflationGenerator\n    metadata: {name: x}\n", want: "HelmChartInflationGenerator is refused", line: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fetched := c
			if tt.notFetched {
				fetched = nil
			}
			root := inflateRepo(t, tt.kustomization, fetched, nil)
			if tt.setup != nil {
				tt.setup(t, root)
			}
			_, err := v.CheckService(context.Background(), ServiceRequest{RepoRoot: root, ServiceDir: "services/shop", Environment: "staging"})
			var me *manifest.Error
			if !errors.As(err, &me) {
				t.Fatalf("want a *manifest.Error, got %v", err)
			}
			for _, p := range me.Problems {
				if p.File == inflateKustomization && p.Line == tt.line && strings.Contains(p.Message, tt.want) {
					if strings.Contains(err.Error(), root) {
						t.Errorf("the error names a machine path: %v", err)
					}
					return
				}
			}
			t.Fatalf("want %s:%d: …%s…, got %v", inflateKustomization, tt.line, tt.want, err)
		})
	}
}
