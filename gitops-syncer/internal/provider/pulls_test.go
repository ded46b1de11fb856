package provider_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
)

// pullsServer serves the list and create calls of GitHub's pulls API and
// GitLab's merge requests API, in their documented shapes, over an
// in-memory list; every create is counted.
type pullsServer struct {
	mu      sync.Mutex
	heads   []string
	creates int
	fail    int // answer creates with this status (and an empty body)
}

func (s *pullsServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	switch r.Method + " " + r.URL.EscapedPath() {
	case "GET /repos/acme/infra/pulls":
		var out []map[string]any
		for i, h := range s.heads {
			if r.URL.Query().Get("head") == "acme:"+h && r.URL.Query().Get("state") == "all" {
				out = append(out, map[string]any{"number": i + 1, "html_url": "https://github.example/acme/infra/pull/" + string(rune('1'+i)), "head": map[string]any{"ref": h}})
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case "GET /api/v4/projects/acme%2Finfra/merge_requests":
		var out []map[string]any
		for i, h := range s.heads {
			if r.URL.Query().Get("source_branch") == h && r.URL.Query().Get("state") == "all" {
				out = append(out, map[string]any{"iid": i + 1, "web_url": "https://gitlab.example/acme/infra/-/merge_requests/" + string(rune('1'+i)), "source_branch": h})
			}
		}
		_ = json.NewEncoder(w).Encode(out)
	case "POST /repos/acme/infra/pulls", "POST /api/v4/projects/acme%2Finfra/merge_requests":
		if s.fail != 0 {
			w.WriteHeader(s.fail)
			return
		}
		var in map[string]any
		_ = json.NewDecoder(r.Body).Decode(&in)
		head, _ := in["head"].(string)
		if head == "" {
			head, _ = in["source_branch"].(string)
		}
		s.heads = append(s.heads, head)
		s.creates++
		n := len(s.heads)
		w.WriteHeader(http.StatusCreated)
		_ = json.NewEncoder(w).Encode(map[string]any{"number": n, "iid": n, "html_url": "https://github.example/acme/infra/pull/" + string(rune('0'+n)),
			"web_url": "https://gitlab.example/acme/infra/-/merge_requests/" + string(rune('0'+n))})
	default:
		http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
	}
}

// TestOpenPullRequest_opensOnceAndFindsItByBranch: on GitHub's and
// GitLab's APIs, the revert pull request is opened once; asked again it
// is found by its branch, never opened twice; a server error with an
// empty body is an error naming the call and the status.
func TestOpenPullRequest_opensOnceAndFindsItByBranch(t *testing.T) {
	for _, p := range []provider.Name{provider.GitHub, provider.GitLab} {
		t.Run(string(p), func(t *testing.T) {
			s := &pullsServer{}
			srv := httptest.NewServer(s)
			t.Cleanup(srv.Close)
			api := &provider.API{Provider: p, BaseURL: srv.URL, Token: func(context.Context) (string, error) { return apiToken, nil }}
			open := provider.PullRequestOpen{Repo: "acme/infra", Head: "sluice/revert-a", Base: "main", Title: "Revert a"}
			ctx := context.Background()

			s.fail = http.StatusUnprocessableEntity // GitLab's client retries 5xx
			_, err := api.OpenPullRequest(ctx, open)
			require.Error(t, err)
			assert.Contains(t, err.Error(), "sluice/revert-a into main")
			assert.Contains(t, err.Error(), "HTTP 422")
			s.fail = 0

			_, found, err := api.FindPullRequest(ctx, open)
			require.NoError(t, err)
			assert.False(t, found)
			pr, err := api.OpenPullRequest(ctx, open)
			require.NoError(t, err)
			assert.Equal(t, int64(1), pr.Number)
			assert.False(t, pr.Existing)
			assert.NotEmpty(t, pr.URL)
			again, err := api.OpenPullRequest(ctx, open)
			require.NoError(t, err)
			assert.True(t, again.Existing)
			assert.Equal(t, pr.Number, again.Number)
			assert.Equal(t, 1, s.creates)
			_, err = api.OpenPullRequest(ctx, provider.PullRequestOpen{Repo: "acme/infra", Head: "x", Base: "main"})
			assert.ErrorContains(t, err, "title")
		})
	}
}

// TestRepoOf_namesTheRepositoryOnlyOnTheProvidersHost maps clone URLs to
// the provider's repository names, and refuses other hosts.
func TestRepoOf_namesTheRepositoryOnlyOnTheProvidersHost(t *testing.T) {
	for _, c := range []struct {
		name     provider.Name
		base     string
		url      string
		want     string
		wantOK   bool
		sentence string
	}{
		{provider.GitHub, "", "https://github.com/acme/infra.git", "acme/infra", true, "public GitHub"},
		{provider.GitHub, "https://api.github.com", "https://github.com/acme/infra", "acme/infra", true, "public GitHub without .git"},
		{provider.GitHub, "https://ghe.example/api/v3", "https://ghe.example/acme/infra.git", "acme/infra", true, "GitHub Enterprise"},
		{provider.GitHub, "", "https://gitlab.com/acme/infra.git", "", false, "another host"},
		{provider.Gitea, "http://gitea.gitea.svc:3000", "http://gitea.gitea.svc:3000/acme/infra.git", "acme/infra", true, "Gitea"},
		{provider.Gitea, "https://git.example/gitea/", "https://git.example/gitea/acme/infra.git", "acme/infra", true, "Gitea under a path"},
		{provider.Gitea, "http://gitea:3000", "ssh://git@gitea:22/acme/infra.git", "", false, "SSH"},
		{provider.Gitea, "http://gitea:3000", "http://gitea:3000/acme/infra/extra.git", "", false, "not owner/name"},
		{provider.GitLab, "https://gitlab.example", "https://gitlab.example/group/sub/infra.git", "group/sub/infra", true, "GitLab subgroups"},
	} {
		t.Run(c.sentence, func(t *testing.T) {
			got, ok := (&provider.API{Provider: c.name, BaseURL: c.base}).RepoOf(c.url)
			assert.Equal(t, c.wantOK, ok)
			assert.Equal(t, c.want, got)
		})
	}
}
