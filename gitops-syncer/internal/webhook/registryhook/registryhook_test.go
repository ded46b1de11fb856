package registryhook_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/registryhook"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const registryHost = "registry.example.com:5000"

// registryPayload reads a testdata payload naming host and repository
// instead of the file's.
func registryPayload(t testing.TB, file, host, repository string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + file)
	require.NoError(t, err)
	s := strings.ReplaceAll(string(b), registryHost, host)
	return []byte(strings.ReplaceAll(s, "charts/web", repository))
}

// TestPush_usesChartsFromItsRegistryRepositoryOrCoveredByTheRepository: a
// push concerns a Repository whose Release takes a chart from that host
// and repository (host case aside), or whose spec.chartRepositories
// oci:// entry is that repository or a folder above it.
func TestPush_usesChartsFromItsRegistryRepositoryOrCoveredByTheRepository(t *testing.T) {
	p := registryhook.Push{Host: "reg.example:5000", Repository: "charts/web"}
	rel := func(url string) []sluicev1.Release {
		return []sluicev1.Release{{Spec: sluicev1.ReleaseSpec{Chart: sluicev1.ChartSource{Repo: url, Name: "web"}}}}
	}
	covers := func(url string) *sluicev1.Repository {
		return &sluicev1.Repository{Spec: sluicev1.RepositorySpec{ChartRepositories: []sluicev1.ChartRepository{{URL: url}}}}
	}
	none := &sluicev1.Repository{}
	assert.True(t, p.Uses(none, rel("oci://REG.example:5000/charts")))
	assert.True(t, p.Uses(none, rel("oci://reg.example:5000/charts/")))
	assert.False(t, p.Uses(none, rel("oci://reg.example/charts")), "another port is another registry")
	assert.False(t, p.Uses(none, rel("oci://reg.example:5000/charts/team")))
	assert.False(t, p.Uses(none, rel("https://reg.example:5000/charts")), "a Helm repository sends no webhooks")
	assert.False(t, p.Uses(none, nil))
	assert.True(t, p.Uses(covers("oci://reg.example:5000"), nil))
	assert.True(t, p.Uses(covers("oci://Reg.Example:5000/charts/"), nil))
	assert.True(t, p.Uses(covers("oci://reg.example:5000/charts/web"), nil))
	assert.False(t, p.Uses(covers("oci://reg.example:5000/chart"), nil), "a prefix only at a /")
	assert.False(t, p.Uses(covers("oci://reg.example:5000/charts/web/x"), nil))
	assert.False(t, p.Uses(covers("https://reg.example:5000/charts"), nil))
}

// TestParseDistribution_readsTaggedPushesOnce: the envelope's layer push
// (no tag) is skipped and the manifest push of a tag read once, however
// often it repeats.
func TestParseDistribution_readsTaggedPushesOnce(t *testing.T) {
	body := registryPayload(t, "distribution-push.json", "Registry.Example.com:5000", "charts/web")
	got, err := registryhook.ParseDistribution(body)
	require.NoError(t, err)
	assert.Equal(t, []registryhook.Push{{Host: "registry.example.com:5000", Repository: "charts/web"}}, got)

	got, err = registryhook.ParseDistribution([]byte(`{"events":[]}`))
	require.NoError(t, err)
	assert.Empty(t, got)
	got, err = registryhook.ParseHarbor(registryPayload(t, "harbor-push-artifact.json", "[::1]:5000", "web"))
	require.NoError(t, err)
	assert.Equal(t, []registryhook.Push{{Host: "[::1]:5000", Repository: "web"}}, got)
}

// TestChartRegistryRepository_namesTheRepositoryAChartIsPushedTo: an
// oci:// chart's registry repository is its URL's path and the chart
// name; other URLs have none.
func TestChartRegistryRepository_namesTheRepositoryAChartIsPushedTo(t *testing.T) {
	for _, tc := range []struct{ url, name, host, repo string }{
		{"oci://Reg.example:5000/charts", "web", "reg.example:5000", "charts/web"},
		{"oci://reg.example/charts/", "web", "reg.example", "charts/web"},
		{"oci://reg.example", "web", "reg.example", "web"},
		{"oci://reg.example/a/b", "web", "reg.example", "a/b/web"},
	} {
		h, r, ok := registryhook.ChartRegistryRepository(tc.url, tc.name)
		assert.True(t, ok, tc.url)
		assert.Equal(t, tc.host, h, tc.url)
		assert.Equal(t, tc.repo, r, tc.url)
	}
	for _, u := range []string{"https://reg.example/charts", "oci://", "charts/web"} {
		_, _, ok := registryhook.ChartRegistryRepository(u, "web")
		assert.False(t, ok, u)
	}
}

// FuzzParseDistribution: any body is read or refused without a panic,
// and what is read names a valid host and repository.
func FuzzParseDistribution(f *testing.F) {
	f.Add(registryPayload(f, "distribution-push.json", registryHost, "charts/web"))
	f.Add([]byte(`{"events":[{"action":"push","target":{"repository":"a","tag":"1"},"request":{"host":"h"}}]}`))
	f.Add([]byte(`{"events":null}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		pushes, err := registryhook.ParseDistribution(body)
		checkPushes(t, pushes, err)
	})
}

// FuzzParseHarbor: as FuzzParseDistribution for Harbor's payload.
func FuzzParseHarbor(f *testing.F) {
	f.Add(registryPayload(f, "harbor-push-artifact.json", registryHost, "charts/web"))
	f.Add([]byte(`{"type":"PUSH_ARTIFACT","event_data":{"resources":[{"tag":"1","resource_url":"h/a@x"}],"repository":{"repo_full_name":"a"}}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		pushes, err := registryhook.ParseHarbor(body)
		checkPushes(t, pushes, err)
	})
}

func checkPushes(t *testing.T, pushes []registryhook.Push, err error) {
	if err != nil {
		if len(pushes) != 0 {
			t.Fatalf("pushes with an error: %v", pushes)
		}
		return
	}
	for _, p := range pushes {
		if p.Host == "" || p.Host != strings.ToLower(p.Host) || strings.ContainsAny(p.Host, "/@ ") || len(p.Host) > 255 {
			t.Fatalf("bad host %q", p.Host)
		}
		if p.Repository == "" || strings.Contains(p.Repository, "..") || strings.HasPrefix(p.Repository, "/") || len(p.Repository) > 255 {
			t.Fatalf("bad repository %q", p.Repository)
		}
	}
}
