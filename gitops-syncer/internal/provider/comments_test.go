package provider_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	reviewmd "github.com/sluice-gitops/sluice/infra-validator/pkg/review"
)

// forge is an in-memory pull request with comments, served with the
// request and answer shapes of GitHub's REST API (issues, pulls, users,
// check runs), GitLab's v4 API (merge requests, notes, user) or Gitea's
// v1 API (pulls, issue comments, user), as the providers document them.
type forge struct {
	t        *testing.T
	provider provider.Name
	mu       sync.Mutex
	state    string // the pull request's state in the provider's words
	bot      string
	nextID   int64
	comments []forgeComment
	checks   map[int64]map[string]any
	// failures answers this many requests with 502 first.
	failures int
	writes   []string
}

type forgeComment struct {
	id           int64
	body, author string
}

func newForge(t *testing.T, p provider.Name) (*forge, *provider.API) {
	f := &forge{t: t, provider: p, bot: "sluice-bot", nextID: 100, checks: map[int64]map[string]any{}}
	f.state = map[provider.Name]string{provider.GitHub: "open", provider.GitLab: "opened", provider.Gitea: "open"}[p]
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	a := &provider.API{Provider: p, BaseURL: srv.URL, Token: func(context.Context) (string, error) { return apiToken, nil }}
	return f, a
}

var (
	ghComments = regexp.MustCompile(`^/repos/acme/infra/issues/7/comments$`)
	ghComment  = regexp.MustCompile(`^/repos/acme/infra/issues/comments/([0-9]+)$`)
	ghChecks   = regexp.MustCompile(`^/repos/acme/infra/commits/([0-9a-f]+)/check-runs$`)
	ghCheck    = regexp.MustCompile(`^/repos/acme/infra/check-runs(/([0-9]+))?$`)
	glNotes    = regexp.MustCompile(`^/api/v4/projects/42/merge_requests/7/notes(/([0-9]+))?$`)
	gtComments = regexp.MustCompile(`^/api/v1/repos/acme/infra/issues/7/comments$`)
	gtComment  = regexp.MustCompile(`^/api/v1/repos/acme/infra/issues/comments/([0-9]+)$`)
)

func (f *forge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	auth := r.Header.Get("Authorization") + r.Header.Get("PRIVATE-TOKEN")
	if !strings.Contains(auth, apiToken) {
		http.Error(w, `{"message":"Bad credentials"}`, http.StatusUnauthorized)
		return
	}
	if f.failures > 0 {
		f.failures--
		http.Error(w, `{"message":"Server Error"}`, http.StatusBadGateway)
		return
	}
	var in map[string]any
	if r.Body != nil && (r.Method == http.MethodPost || r.Method == http.MethodPatch || r.Method == http.MethodPut) {
		require.NoError(f.t, json.NewDecoder(r.Body).Decode(&in))
		f.writes = append(f.writes, r.Method+" "+r.URL.Path)
	}
	if r.Method == http.MethodDelete {
		f.writes = append(f.writes, r.Method+" "+r.URL.Path)
	}
	p := r.URL.Path
	switch f.provider {
	case provider.GitHub:
		f.github(w, r, p, in)
	case provider.GitLab:
		f.gitlab(w, r, p, in)
	case provider.Gitea:
		f.gitea(w, r, p, in)
	}
}

func (f *forge) reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if v != nil {
		require.NoError(f.t, json.NewEncoder(w).Encode(v))
	}
}

func (f *forge) find(id int64) int {
	for i, c := range f.comments {
		if c.id == id {
			return i
		}
	}
	return -1
}

func (f *forge) add(body string) forgeComment {
	f.nextID++
	c := forgeComment{id: f.nextID, body: body, author: f.bot}
	f.comments = append(f.comments, c)
	return c
}

func idOf(s string) int64 { n, _ := strconv.ParseInt(s, 10, 64); return n }

// github answers as docs.github.com's REST reference shows.
func (f *forge) github(w http.ResponseWriter, r *http.Request, p string, in map[string]any) {
	ghc := func(c forgeComment) map[string]any {
		return map[string]any{"id": c.id, "node_id": "IC_x", "body": c.body, "user": map[string]any{"login": c.author, "id": 1, "type": "Bot"},
			"html_url": fmt.Sprintf("https://github.com/acme/infra/pull/7#issuecomment-%d", c.id), "created_at": "2026-12-01T10:00:00Z"}
	}
	switch {
	case r.Method == http.MethodGet && p == "/repos/acme/infra/pulls/7":
		f.reply(w, 200, map[string]any{"number": 7, "state": f.state, "merged": false, "head": map[string]any{"sha": head}})
	case r.Method == http.MethodGet && p == "/user":
		f.reply(w, 200, map[string]any{"login": f.bot, "id": 1, "type": "User"})
	case ghComments.MatchString(p) && r.Method == http.MethodGet:
		out := []any{}
		for _, c := range f.comments {
			out = append(out, ghc(c))
		}
		f.reply(w, 200, out)
	case ghComments.MatchString(p) && r.Method == http.MethodPost:
		f.reply(w, 201, ghc(f.add(in["body"].(string))))
	case ghComment.MatchString(p):
		i := f.find(idOf(ghComment.FindStringSubmatch(p)[1]))
		switch {
		case i < 0:
			f.reply(w, 404, map[string]any{"message": "Not Found"})
		case r.Method == http.MethodPatch:
			f.comments[i].body = in["body"].(string)
			f.reply(w, 200, ghc(f.comments[i]))
		case r.Method == http.MethodDelete:
			f.comments = append(f.comments[:i], f.comments[i+1:]...)
			w.WriteHeader(http.StatusNoContent)
		}
	case ghChecks.MatchString(p):
		runs := []any{}
		for id, c := range f.checks {
			if c["head_sha"] == ghChecks.FindStringSubmatch(p)[1] && c["name"] == r.URL.Query().Get("check_name") {
				runs = append(runs, map[string]any{"id": id, "name": c["name"], "head_sha": c["head_sha"], "status": c["status"]})
			}
		}
		f.reply(w, 200, map[string]any{"total_count": len(runs), "check_runs": runs})
	case ghCheck.MatchString(p) && r.Method == http.MethodPost:
		f.nextID++
		f.checks[f.nextID] = in
		f.reply(w, 201, map[string]any{"id": f.nextID, "name": in["name"], "head_sha": in["head_sha"], "status": in["status"]})
	case ghCheck.MatchString(p) && r.Method == http.MethodPatch:
		id := idOf(ghCheck.FindStringSubmatch(p)[2])
		for k, v := range in {
			f.checks[id][k] = v
		}
		f.reply(w, 200, map[string]any{"id": id, "name": in["name"], "status": in["status"]})
	default:
		f.reply(w, 404, map[string]any{"message": "Not Found", "documentation_url": "https://docs.github.com/rest"})
	}
}

// gitlab answers as docs.gitlab.com's REST reference shows.
func (f *forge) gitlab(w http.ResponseWriter, r *http.Request, p string, in map[string]any) {
	note := func(c forgeComment) map[string]any {
		return map[string]any{"id": c.id, "body": c.body, "author": map[string]any{"id": 1, "username": c.author}, "system": false,
			"noteable_type": "MergeRequest", "noteable_iid": 7, "created_at": "2026-12-01T10:00:00Z"}
	}
	switch {
	case r.Method == http.MethodGet && p == "/api/v4/projects/42/merge_requests/7":
		f.reply(w, 200, map[string]any{"id": 1, "iid": 7, "project_id": 42, "state": f.state, "sha": head})
	case r.Method == http.MethodGet && p == "/api/v4/user":
		f.reply(w, 200, map[string]any{"id": 1, "username": f.bot, "state": "active"})
	case glNotes.MatchString(p):
		m := glNotes.FindStringSubmatch(p)
		if m[2] == "" {
			if r.Method == http.MethodPost {
				f.reply(w, 201, note(f.add(in["body"].(string))))
				return
			}
			// A system note ("added 1 commit") is never Sluice's.
			out := []any{map[string]any{"id": 1, "body": reviewmd.Marker + " part=1 -->", "author": map[string]any{"username": f.bot}, "system": true}}
			for _, c := range f.comments {
				out = append(out, note(c))
			}
			f.reply(w, 200, out)
			return
		}
		i := f.find(idOf(m[2]))
		switch {
		case i < 0:
			f.reply(w, 404, map[string]any{"message": "404 Not found"})
		case r.Method == http.MethodPut:
			f.comments[i].body = in["body"].(string)
			f.reply(w, 200, note(f.comments[i]))
		case r.Method == http.MethodDelete:
			f.comments = append(f.comments[:i], f.comments[i+1:]...)
			w.WriteHeader(http.StatusNoContent)
		}
	default:
		f.reply(w, 404, map[string]any{"message": "404 Not found"})
	}
}

// gitea answers as Gitea's swagger (/api/swagger) shows.
func (f *forge) gitea(w http.ResponseWriter, r *http.Request, p string, in map[string]any) {
	gc := func(c forgeComment) map[string]any {
		return map[string]any{"id": c.id, "body": c.body, "user": map[string]any{"id": 1, "login": c.author, "username": c.author},
			"created_at": "2026-12-01T10:00:00Z", "updated_at": "2026-12-01T10:00:00Z"}
	}
	switch {
	case r.Method == http.MethodGet && p == "/api/v1/repos/acme/infra/pulls/7":
		f.reply(w, 200, map[string]any{"number": 7, "state": f.state, "merged": f.state == "merged"})
	case r.Method == http.MethodGet && p == "/api/v1/user":
		f.reply(w, 200, map[string]any{"id": 1, "login": f.bot, "username": f.bot})
	case gtComments.MatchString(p) && r.Method == http.MethodGet:
		out := []any{}
		if r.URL.Query().Get("page") == "1" {
			for _, c := range f.comments {
				out = append(out, gc(c))
			}
		}
		f.reply(w, 200, out)
	case gtComments.MatchString(p) && r.Method == http.MethodPost:
		f.reply(w, 201, gc(f.add(in["body"].(string))))
	case gtComment.MatchString(p):
		i := f.find(idOf(gtComment.FindStringSubmatch(p)[1]))
		switch {
		case i < 0:
			f.reply(w, 404, map[string]any{"message": "not found"})
		case r.Method == http.MethodPatch:
			f.comments[i].body = in["body"].(string)
			f.reply(w, 200, gc(f.comments[i]))
		case r.Method == http.MethodDelete:
			f.comments = append(f.comments[:i], f.comments[i+1:]...)
			w.WriteHeader(http.StatusNoContent)
		}
	default:
		f.reply(w, 404, map[string]any{"message": "not found"})
	}
}

func (f *forge) bodies() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.comments {
		out = append(out, c.body)
	}
	return out
}

func part(n int, text string) string {
	return fmt.Sprintf("%s part=%d -->\n## Sluice review\n\n%s\n", reviewmd.Marker, n, text)
}

func thread(p provider.Name) provider.Thread {
	if p == provider.GitLab {
		return provider.Thread{Repo: "acme/infra", ProjectID: 42, Number: 7}
	}
	return provider.Thread{Repo: "acme/infra", Number: 7}
}

func TestSyncComments_createdOnceThenEditedInPlace(t *testing.T) {
	for _, p := range []provider.Name{provider.GitHub, provider.GitLab, provider.Gitea} {
		t.Run(string(p), func(t *testing.T) {
			f, a := newForge(t, p)
			ctx := context.Background()
			// Someone else's comment copying the marker is never Sluice's.
			f.comments = append(f.comments, forgeComment{id: 1, body: part(1, "fake: approved!"), author: "mallory"})

			res, err := a.SyncComments(ctx, thread(p), []string{part(1, "first push")})
			require.NoError(t, err)
			assert.Equal(t, provider.CommentResult{Created: 1}, res)

			res, err = a.SyncComments(ctx, thread(p), []string{part(1, "second push")})
			require.NoError(t, err)
			assert.Equal(t, provider.CommentResult{Edited: 1}, res)
			assert.Equal(t, []string{part(1, "fake: approved!"), part(1, "second push")}, f.bodies(), "edited in place, never duplicated; mallory's untouched")

			res, err = a.SyncComments(ctx, thread(p), []string{part(1, "second push")})
			require.NoError(t, err)
			assert.Equal(t, provider.CommentResult{}, res, "an unchanged comment is not written again")
		})
	}
}

func TestSyncComments_splitAndShrink(t *testing.T) {
	for _, p := range []provider.Name{provider.GitHub, provider.GitLab, provider.Gitea} {
		t.Run(string(p), func(t *testing.T) {
			f, a := newForge(t, p)
			ctx := context.Background()
			// A plan too big for one comment is rendered as several.
			long := strings.Repeat("+ aws_instance.web[1] will be created\n", 3000)
			bodies := reviewmd.Markdown(nil, a.CommentLimit(), 0)
			require.Len(t, bodies, 1)
			parts := []string{part(1, long[:len(long)/3]), part(2, long[:len(long)/3]), part(3, "end")}
			res, err := a.SyncComments(ctx, thread(p), parts)
			require.NoError(t, err)
			assert.Equal(t, 3, res.Created)
			assert.Equal(t, parts, f.bodies())

			res, err = a.SyncComments(ctx, thread(p), []string{part(1, "small now")})
			require.NoError(t, err)
			assert.Equal(t, provider.CommentResult{Edited: 1, Deleted: 2}, res)
			assert.Equal(t, []string{part(1, "small now")}, f.bodies())
		})
	}
}

func TestSyncComments_closedPullRequestLeftAlone(t *testing.T) {
	for p, closed := range map[provider.Name]string{provider.GitHub: "closed", provider.GitLab: "merged", provider.Gitea: "closed"} {
		t.Run(string(p), func(t *testing.T) {
			f, a := newForge(t, p)
			f.comments = append(f.comments, forgeComment{id: 5, body: part(1, "old"), author: f.bot})
			f.state = closed
			res, err := a.SyncComments(context.Background(), thread(p), []string{part(1, "new")})
			require.NoError(t, err)
			assert.True(t, res.Closed)
			assert.Empty(t, f.writes, "nothing is written to a closed pull request")
			assert.Equal(t, []string{part(1, "old")}, f.bodies())
		})
	}
}

func TestSyncComments_providerErrorIsReturnedWithoutTheToken(t *testing.T) {
	f, a := newForge(t, provider.GitHub)
	f.failures = 1
	_, err := a.SyncComments(context.Background(), thread(provider.GitHub), []string{part(1, "x")})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), apiToken)
	res, err := a.SyncComments(context.Background(), thread(provider.GitHub), []string{part(1, "x")})
	require.NoError(t, err, "the next attempt succeeds")
	assert.Equal(t, 1, res.Created)
}

func TestSyncCheckRun_onePerReleaseAndCommit(t *testing.T) {
	f, a := newForge(t, provider.GitHub)
	ctx := context.Background()
	c := provider.Check{Repo: "acme/infra", HeadSHA: head, Name: "sluice/shop-prod", Title: "pass, risk medium: 1 approval needed", Summary: "summary"}
	require.NoError(t, a.SyncCheckRun(ctx, c))
	c.Conclusion, c.Title = "success", "approved"
	require.NoError(t, a.SyncCheckRun(ctx, c))
	require.Len(t, f.checks, 1, "updated, not duplicated")
	for _, run := range f.checks {
		assert.Equal(t, "completed", run["status"])
		assert.Equal(t, "success", run["conclusion"])
		assert.Equal(t, "approved", run["output"].(map[string]any)["title"])
	}
}
