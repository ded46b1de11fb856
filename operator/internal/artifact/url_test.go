package artifact

import (
	"net/url"
	"path"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestUnderBase_onlyPathsBelowTheBaseOnTheSameServer(t *testing.T) {
	base, err := url.Parse("http://artifacts.sluice.svc:8080/artifacts/")
	require.NoError(t, err)
	cases := map[string]bool{
		"http://artifacts.sluice.svc:8080/artifacts/infra/abc/web-staging.tar.gz": true,
		"HTTP://ARTIFACTS.sluice.svc:8080/artifacts/x.tar.gz":                     true,
		"https://artifacts.sluice.svc:8080/artifacts/x.tar.gz":                    false,
		"http://artifacts.sluice.svc:8081/artifacts/x.tar.gz":                     false,
		"http://artifacts.sluice.svc/artifacts/x.tar.gz":                          false,
		"http://evil.example/artifacts/x.tar.gz":                                  false,
		"http://artifacts.sluice.svc:8080/artifactsX/x.tar.gz":                    false,
		"http://artifacts.sluice.svc:8080/artifacts/../secrets":                   false,
		"http://artifacts.sluice.svc:8080/artifacts/a/../../secrets":              false,
		"http://artifacts.sluice.svc:8080/artifacts/%2e%2e/secrets":               false,
		"http://artifacts.sluice.svc:8080/artifacts/a%2f..%2f..%2fsecrets":        false,
		"http://artifacts.sluice.svc:8080/artifacts//x":                           false,
		"http://u:p@artifacts.sluice.svc:8080/artifacts/x.tar.gz":                 false,
		"http://artifacts.sluice.svc:8080/artifacts":                              false,
		"http://artifacts.sluice.svc:8080/artifacts/":                             false,
	}
	for raw, want := range cases {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		require.Equal(t, want, underBase(base, u), raw)
	}
}

// FuzzUnderBase: whatever the URL, an accepted one is on the base's server
// and its path, cleaned, stays below the base path.
func FuzzUnderBase(f *testing.F) {
	for _, s := range []string{
		"http://a.svc/artifacts/x.tar.gz", "http://a.svc/artifacts/../x", "http://a.svc/artifacts/%2e%2e/x",
		"http://b.svc/artifacts/x", "http://a.svc/artifacts/a/./b", "//a.svc/artifacts/x", "http://a.svc:80/artifacts/x",
	} {
		f.Add(s)
	}
	base, _ := url.Parse("http://a.svc/artifacts/")
	f.Fuzz(func(t *testing.T, raw string) {
		u, err := url.Parse(raw)
		if err != nil || !underBase(base, u) {
			return
		}
		require.Equal(t, "http", strings.ToLower(u.Scheme))
		require.Equal(t, "a.svc", strings.ToLower(u.Host))
		require.Nil(t, u.User)
		require.True(t, strings.HasPrefix(path.Clean(u.Path), "/artifacts/"), u.Path)
		require.NotContains(t, "/"+u.Path+"/", "/../")
	})
}
