package manifest

import (
	"strings"
	"testing"
)

const envChartService = `apiVersion: sluice.dev/v1alpha1
kind: Service
name: web
chart: {repo: "oci://registry.example/charts", name: web, version: "~1.1"}
environments:
  - name: staging
    namespace: web-staging
  - name: prod
    namespace: web-prod
    chart: {version: 1.0.3}
  - name: canary
    namespace: web-canary
    chart: {repo: "https://charts.example/stable", name: web-next}
  - name: local
    namespace: web-local
    chart: {path: charts/web}
`

func TestParse_anEnvironmentsChartOverridesTheServicesChart(t *testing.T) {
	svc, err := Parse([]byte(envChartService), "service.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]Chart{
		"staging": {Repo: "oci://registry.example/charts", Name: "web", Version: "~1.1"},
		"prod":    {Repo: "oci://registry.example/charts", Name: "web", Version: "1.0.3"},
		"canary":  {Repo: "https://charts.example/stable", Name: "web-next", Version: "~1.1"},
		"local":   {Path: "charts/web"},
	}
	for env, c := range want {
		if got := svc.ChartOf(env); got != c {
			t.Errorf("%s: got %+v, want %+v", env, got, c)
		}
	}
	if svc.ChartDirOf("local") != "charts/web" || svc.ChartDirOf("prod") != "" {
		t.Errorf("chart folders: %q %q", svc.ChartDirOf("local"), svc.ChartDirOf("prod"))
	}
}

func TestParse_refusesBadEnvironmentChartsWithFileAndLine(t *testing.T) {
	tests := map[string]struct{ manifest, want string }{
		"a range that is not one":      {strings.Replace(envChartService, "chart: {version: 1.0.3}", "chart: {version: latest}", 1), `service.yaml:10: chart.version "latest" must be a version or a semver range`},
		"a version with a path":        {strings.Replace(envChartService, "chart: {path: charts/web}", "chart: {path: charts/web, version: 1.0.0}", 1), "service.yaml:16: chart name and version go with repo, not path"},
		"a path out of the repository": {strings.Replace(envChartService, "chart: {path: charts/web}", "chart: {path: ../web}", 1), "must not contain '..'"},
		"credentials in the repo":      {strings.Replace(envChartService, "https://charts.example", "https://u:p@charts.example", 1), "service.yaml:13: chart.repo must not carry credentials"},
		"with kustomize":               {strings.Replace(envChartService, "    chart: {version: 1.0.3}", "    chart: {version: 1.0.3}\n    kustomize: {path: overlay}", 1), "chart goes with a chart, not with kustomize or manifests"},
		"no chart anywhere":            {strings.Replace(strings.Replace(envChartService, `chart: {repo: "oci://registry.example/charts", name: web, version: "~1.1"}`+"\n", "", 1), "    chart: {version: 1.0.3}\n", "", 1), "chart needs either path or repo"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(tt.manifest), "service.yaml")
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("want …%s…, got %v", tt.want, err)
			}
		})
	}
}

// FuzzHelmChartsOf: a kustomization's helmCharts (pusher input) never
// crash the parser, and what it accepts has repository paths only.
func FuzzHelmChartsOf(f *testing.F) {
	f.Add([]byte("helmCharts:\n  - name: web\n    repo: https://charts.example\n    version: ~1.1\n    releaseName: x\n    valuesFile: v.yaml\n"))
	f.Add([]byte("helmCharts:\n  - {name: a, repo: 'oci://r/x', version: '1.0.0', releaseName: a, additionalValuesFiles: [../x, /etc/passwd], valuesInline: {a: [1, {b: c}]}}\n"))
	f.Add([]byte("helmCharts: [1, x, {}]\n"))
	f.Add([]byte("helmCharts: {name: x}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		charts, err := HelmChartsOf(data, "overlays/a", "overlays/a/kustomization.yaml")
		if err != nil {
			return
		}
		for _, h := range charts {
			if h.Repo == "" || h.Version == "" || h.ReleaseName == "" || h.Name == "" {
				t.Fatalf("an incomplete entry was accepted: %+v", h)
			}
		}
	})
}
