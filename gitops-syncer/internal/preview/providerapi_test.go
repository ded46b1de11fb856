package preview_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
)

// fakeAPI is an httptest server speaking the parts of GitHub's, Gitea's
// and GitLab's REST APIs the syncer uses: commit statuses, collaborator
// permissions, a pull request's reviews, GitLab members, merge requests
// and their approvals. Answers are the documented shapes from
// testdata/providerapi with the test's users, states and commits.
type fakeAPI struct {
	*httptest.Server
	t  *testing.T
	mu sync.Mutex

	statuses []map[string]string
	// perms: login → GitHub/Gitea permission ("none" when absent).
	perms map[string]string
	// reviews: pull request → reviews, oldest first.
	reviews map[int64][]map[string]any
	// GitLab: access level by user id, merge request head, approvers.
	glAccess     map[int64]int
	glSHA        string
	glApprovedBy []int64
}

func apiFixture(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "providerapi", name))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	return m
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{t: t, perms: map[string]string{}, reviews: map[int64][]map[string]any{}, glAccess: map[int64]int{}}
	f.Server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.Close)
	return f
}

// api is a provider.API of p against the fake.
func (f *fakeAPI) api(p provider.Name) *provider.API {
	return &provider.API{Provider: p, BaseURL: f.URL, Token: func(context.Context) (string, error) { return "api-token", nil }}
}

// review adds a review of pull request pr as the provider would list it.
func (f *fakeAPI) review(p provider.Name, pr, id int64, login, state, commit string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fix := "github-review.json"
	if p == provider.Gitea {
		fix = "gitea-review.json"
	}
	r := apiFixture(f.t, fix)
	r["id"], r["state"], r["commit_id"] = id, state, commit
	r["user"].(map[string]any)["login"] = login
	f.reviews[pr] = append(f.reviews[pr], r)
}

// setState changes a listed review's state (GitHub shows a dismissed
// review as DISMISSED).
func (f *fakeAPI) setState(pr, id int64, state string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.reviews[pr] {
		if r["id"] == id {
			r["state"] = state
		}
	}
}

func (f *fakeAPI) setApprovedBy(ids ...int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.glApprovedBy = ids
}

func (f *fakeAPI) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Header.Get("Authorization") == "" && r.Header.Get("PRIVATE-TOKEN") == "" {
		http.Error(w, `{"message":"Requires authentication"}`, http.StatusUnauthorized)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	last := parts[len(parts)-1]
	write := func(v any) { _ = json.NewEncoder(w).Encode(v) }
	switch {
	case r.Method == http.MethodPost && strings.Contains(r.URL.Path, "/statuses/"):
		var body map[string]string
		data, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(data, &body)
		body["path"] = r.URL.Path
		f.statuses = append(f.statuses, body)
		w.WriteHeader(http.StatusCreated)
	case last == "permission":
		perm := f.perms[parts[len(parts)-2]]
		if perm == "" {
			perm = "none"
		}
		m := apiFixture(f.t, "github-permission.json")
		m["permission"], m["role_name"] = perm, perm
		if perm == "maintain" {
			m["permission"] = "write" // GitHub reports maintain as write with role_name maintain
		}
		write(m)
	case last == "reviews":
		pr, _ := strconv.ParseInt(parts[len(parts)-2], 10, 64)
		if r.URL.Query().Get("page") != "1" {
			write([]any{})
			return
		}
		list := f.reviews[pr]
		if list == nil {
			list = []map[string]any{}
		}
		write(list)
	case strings.Contains(r.URL.Path, "/members/all/"):
		id, _ := strconv.ParseInt(last, 10, 64)
		level, ok := f.glAccess[id]
		if !ok {
			http.Error(w, `{"message":"404 Not found"}`, http.StatusNotFound)
			return
		}
		m := apiFixture(f.t, "gitlab-member.json")
		m["id"], m["access_level"] = id, level
		write(m)
	case last == "approvals":
		m := apiFixture(f.t, "gitlab-approvals.json")
		var by []any
		for _, id := range f.glApprovedBy {
			by = append(by, map[string]any{"user": map[string]any{"id": id, "username": "user" + strconv.FormatInt(id, 10)}})
		}
		m["approved_by"], m["approved"] = by, len(by) > 0
		write(m)
	case len(parts) >= 5 && parts[len(parts)-2] == "merge_requests":
		m := apiFixture(f.t, "gitlab-merge-request.json")
		m["sha"] = f.glSHA
		write(m)
	default:
		http.NotFound(w, r)
	}
}
