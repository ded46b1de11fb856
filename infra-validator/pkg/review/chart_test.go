package review

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestBuild_aChartFromAChartRepositoryShowsItsVersionDiff(t *testing.T) {
	d := func(c string) sluicev1.Digest { return sluicev1.Digest("sha256:" + strings.Repeat(c, 64)) }
	change := func(version string, digest sluicev1.Digest) *sluicev1.ChangeRequest {
		return &sluicev1.ChangeRequest{
			ObjectMeta: metav1.ObjectMeta{Name: "web-staging-abc", Namespace: "ctl"},
			Spec: sluicev1.ChangeRequestSpec{Release: "web-staging", Revision: strings.Repeat("a", 40), Source: &sluicev1.ChangeSource{
				Chart: sluicev1.ChartSource{Repo: "oci://registry.example/charts", Name: "web", Version: version, Digest: digest}}},
		}
	}
	applied := &sluicev1.ChartSource{Repo: "oci://registry.example/charts", Name: "web", Version: "1.1.0", Digest: d("a")}
	for name, tc := range map[string]struct {
		cr       *sluicev1.ChangeRequest
		previous *sluicev1.ChartSource
		want     string
	}{
		"a newer version in the range": {change("1.1.1", d("b")), applied, "Chart web 1.1.0 → 1.1.1 from oci://registry.example/charts (sha256:aaaaaaaaaaaa → sha256:bbbbbbbbbbbb)"},
		"a moved tag":                  {change("1.1.0", d("c")), applied, "the repository now serves other bytes for 1.1.0 than the applied sha256:aaaaaaaaaaaa"},
		"nothing applied":              {change("1.1.0", d("a")), nil, "nothing applied from a chart repository yet"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := Build(Input{Change: tc.cr, PreviousChart: tc.previous})
			if err != nil {
				t.Fatal(err)
			}
			if s.Chart == nil || !strings.Contains(s.Chart.Line(), tc.want) {
				t.Fatalf("chart line %v, want %q", s.Chart, tc.want)
			}
			var text strings.Builder
			if err := Text(&text, s, false); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(text.String(), tc.want) {
				t.Fatalf("the text review does not show the chart:\n%s", text.String())
			}
		})
	}
}

func TestBuild_theChartsOfAnOverlaysHelmChartsShowTheirVersionDiffs(t *testing.T) {
	d := func(c string) sluicev1.Digest { return sluicev1.Digest("sha256:" + strings.Repeat(c, 64)) }
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "shop-staging-abc", Namespace: "ctl"},
		Spec: sluicev1.ChangeRequestSpec{Release: "shop-staging", Revision: strings.Repeat("a", 40), Source: &sluicev1.ChangeSource{
			Chart: sluicev1.ChartSource{Kustomize: &sluicev1.KustomizeSource{Path: "services/shop/overlay"}},
			HelmCharts: []sluicev1.ChartSource{
				{Repo: "oci://registry.example/charts", Name: "web", Version: "1.1.1", Digest: d("b")},
				{Repo: "https://charts.example/stable", Name: "redis", Version: "2.0.0", Digest: d("c")},
			}}},
	}
	s, err := Build(Input{Change: cr, PreviousHelmCharts: []sluicev1.ChartSource{{Repo: "oci://registry.example/charts", Name: "web", Version: "1.1.0", Digest: d("a")}}})
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	if err := Text(&text, s, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"helmCharts: Chart web 1.1.0 → 1.1.1 from oci://registry.example/charts (sha256:aaaaaaaaaaaa → sha256:bbbbbbbbbbbb)",
		"helmCharts: Chart redis 2.0.0 (sha256:cccccccccccc) from https://charts.example/stable, nothing applied from a chart repository yet",
	} {
		if !strings.Contains(text.String(), want) {
			t.Fatalf("want %q in the review:\n%s", want, text.String())
		}
	}
	if s.Chart != nil {
		t.Fatalf("an overlay has no service chart line: %+v", s.Chart)
	}
}
