package changespec_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
)

const header = "apiVersion: sluice.dev/v1alpha1\nkind: Service\n"

// cacheOf fetches the repository into a real go-git cache at its head.
func cacheOf(t *testing.T, repo *gittest.Repo) (*git.Repo, string) {
	t.Helper()
	c, err := git.NewGoGit(t.TempDir(), git.URLPolicy{AllowFile: true}, nil)
	require.NoError(t, err)
	head := repo.Head("main")
	cache, err := c.Fetch(context.Background(), git.Remote{Key: "ns/infra", URL: repo.FileURL()}, "refs/heads/main", head)
	require.NoError(t, err)
	return cache, head
}

func TestExtractRelease_writesTheReleaseAsItWasAndSaysWhenItDidNotExist(t *testing.T) {
	repo := gittest.NewRepo(t, t.TempDir(), "infra")
	repo.WriteFile("charts/service/Chart.yaml", "apiVersion: v2\nname: service\nversion: 0.1.0\n")
	repo.WriteFile("services/web/service.yaml", header+"name: web\nchart: {path: charts/service}\nenvironments:\n  - name: staging\n    namespace: web-staging\n")
	repo.WriteFile("services/web/values.yaml", "replicas: 1\n")
	repo.WriteFile("services/bad/service.yaml", header+"name: bad\nnope: 1\n")
	repo.Commit("first", "alice@example.com")
	cache, head := cacheOf(t, repo)

	t.Run("a release that existed is extracted with its chart", func(t *testing.T) {
		dir := t.TempDir()
		svc, err := changespec.ExtractRelease(cache, head, "services/web", "web", "staging", dir)
		require.NoError(t, err)
		assert.Equal(t, "web", svc.Name)
		assert.Equal(t, "services/web", svc.Dir)
		for _, f := range []string{"services/web/service.yaml", "services/web/values.yaml", "charts/service/Chart.yaml"} {
			assert.FileExists(t, filepath.Join(dir, f))
		}
	})

	absent := []struct{ name, dir, service, env string }{
		{"a folder without a manifest: the service is new", "services/api", "api", "staging"},
		{"a manifest without the environment: the environment is new", "services/web", "web", "prod"},
	}
	for _, tt := range absent {
		t.Run(tt.name, func(t *testing.T) {
			_, err := changespec.ExtractRelease(cache, head, tt.dir, tt.service, tt.env, t.TempDir())
			var ae *changespec.AbsentError
			assert.ErrorAs(t, err, &ae)
		})
	}

	failing := []struct{ name, rev, dir, service, want string }{
		{"a commit the cache lacks", "0123456789012345678901234567890123456789", "services/web", "web", "not in the local git cache"},
		{"a manifest naming another service", head, "services/web", "shop", `names service "web", not "shop"`},
		{"a manifest that does not parse", head, "services/bad", "bad", "at " + head[:7]},
	}
	for _, tt := range failing {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := changespec.ExtractRelease(cache, tt.rev, tt.dir, tt.service, "staging", dir)
			require.Error(t, err)
			var ae *changespec.AbsentError
			assert.NotErrorAs(t, err, &ae, "a release that cannot be read is not a new one")
			assert.Contains(t, err.Error(), tt.want)
			left, _ := os.ReadDir(dir)
			assert.Empty(t, left, "nothing is extracted")
		})
	}
}
