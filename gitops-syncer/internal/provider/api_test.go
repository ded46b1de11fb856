package provider_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
)

const (
	apiToken = "s3cret-api-token"
	head     = "ecdd80bb57125d7ba9641ffaa4d7d2c19d3f3091"
)

// answer is a testdata/providerapi document with fields replaced.
func answer(t *testing.T, name string, set map[string]any) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "providerapi", name))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for k, v := range set {
		m[k] = v
	}
	return m
}

// serve answers GET paths from a map; anything else is a 404.
func serve(t *testing.T, answers map[string]any) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "" && r.Header.Get("PRIVATE-TOKEN") == "" {
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
			return
		}
		v, ok := answers[r.URL.Path]
		if !ok || (strings.HasSuffix(r.URL.Path, "/reviews") && r.URL.Query().Get("page") != "1") {
			if ok {
				_, _ = w.Write([]byte("[]"))
				return
			}
			http.Error(w, `{"message":"Not Found"}`, http.StatusNotFound)
			return
		}
		_ = json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func api(p provider.Name, url string) *provider.API {
	return &provider.API{Provider: p, BaseURL: url, Token: func(context.Context) (string, error) { return apiToken, nil }}
}

func ghReviewEvent(id int64, login string, state provider.ReviewState) *provider.Event {
	return &provider.Event{Provider: provider.GitHub, Repo: "platform/infra", Kind: provider.KindReview, Review: &provider.Review{
		PullRequest: provider.PullRequest{Number: 12, HeadSHA: head}, ID: id, State: state, CommitSHA: head,
		Reviewer: "github:" + login, Login: login, Access: provider.AccessUnknown}}
}

func review(t *testing.T, id int64, login, state string) map[string]any {
	return answer(t, "github-review.json", map[string]any{"id": id, "state": state, "commit_id": head, "user": map[string]any{"login": login}})
}

// TestConfirm_gitHubCountsWritePermissionAndTheLatestReviewOnly: a
// read-only organisation member's approval is refused (the attack: on the
// payload alone, MEMBER counted as write access); write, maintain and admin
// count; a review that is not the reviewer's latest decision is refused.
func TestConfirm_gitHubCountsWritePermissionAndTheLatestReviewOnly(t *testing.T) {
	perm := func(p, role string) map[string]any {
		return answer(t, "github-permission.json", map[string]any{"permission": p, "role_name": role})
	}
	reviews := []any{review(t, 80, "mallory", "APPROVED"), review(t, 81, "alice", "APPROVED"), review(t, 82, "bob", "APPROVED"),
		review(t, 83, "carol", "APPROVED"), review(t, 84, "carol", "COMMENTED"), review(t, 85, "dave", "APPROVED"), review(t, 86, "dave", "CHANGES_REQUESTED")}
	srv := serve(t, map[string]any{
		"/repos/platform/infra/collaborators/mallory/permission": perm("read", "read"),
		"/repos/platform/infra/collaborators/alice/permission":   perm("admin", "admin"),
		"/repos/platform/infra/collaborators/bob/permission":     perm("write", "maintain"),
		"/repos/platform/infra/collaborators/carol/permission":   perm("write", "write"),
		"/repos/platform/infra/collaborators/dave/permission":    perm("write", "write"),
		"/repos/platform/infra/pulls/12/reviews":                 reviews,
	})
	a := api(provider.GitHub, srv.URL)
	cases := []struct {
		name  string
		ev    *provider.Event
		count bool
	}{
		{"a read-only member's approval", ghReviewEvent(80, "mallory", provider.ReviewApproved), false},
		{"an admin's approval", ghReviewEvent(81, "alice", provider.ReviewApproved), true},
		{"a maintainer's approval", ghReviewEvent(82, "bob", provider.ReviewApproved), true},
		{"an approval followed by a comment (comments decide nothing)", ghReviewEvent(83, "carol", provider.ReviewApproved), true},
		{"an approval the reviewer has since replaced by a rejection", ghReviewEvent(85, "dave", provider.ReviewApproved), false},
		{"the rejection that replaced it", ghReviewEvent(86, "dave", provider.ReviewChangesRequested), true},
		{"an approval with an id GitHub does not list", ghReviewEvent(99, "alice", provider.ReviewApproved), false},
		{"a user GitHub does not know", ghReviewEvent(81, "nobody", provider.ReviewApproved), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := a.Confirm(context.Background(), c.ev)
			if !c.count {
				require.Error(t, err)
				assert.Nil(t, got)
				assert.NotContains(t, err.Error(), apiToken)
				if !strings.Contains(c.name, "does not know") {
					assert.ErrorIs(t, err, provider.ErrUnconfirmed)
				}
				return
			}
			require.NoError(t, err)
			assert.Equal(t, provider.AccessWrite, got.Access)
			assert.Equal(t, c.ev.Review.ID, got.ID)
		})
	}
}

func glEvent(state provider.ReviewState) *provider.Event {
	return &provider.Event{Provider: provider.GitLab, Repo: "platform/infra", ProjectID: 15, Kind: provider.KindReview, Review: &provider.Review{
		PullRequest: provider.PullRequest{Number: 1, HeadSHA: head}, ID: 1234, State: state, CommitSHA: head,
		Reviewer: "gitlab:bob", Login: "bob", UserID: 5, Access: provider.AccessUnknown}}
}

// TestConfirm_gitLabApprovalsAreWhatTheApprovalsAPISays: after bob
// unapproves, a replayed "approved" event (a new delivery id, so a new
// derived review id) is refused because approved_by no longer lists him;
// a member below the configured access level, a non-member and an approval
// of an older head are refused too.
func TestConfirm_gitLabApprovalsAreWhatTheApprovalsAPISays(t *testing.T) {
	approvedBy := func(ids ...int64) map[string]any {
		var by []any
		for _, id := range ids {
			by = append(by, map[string]any{"user": map[string]any{"id": id, "username": "bob"}})
		}
		return answer(t, "gitlab-approvals.json", map[string]any{"approved_by": by})
	}
	answers := map[string]any{
		"/api/v4/projects/15/members/all/5":              answer(t, "gitlab-member.json", nil),
		"/api/v4/projects/15/merge_requests/1":           answer(t, "gitlab-merge-request.json", nil),
		"/api/v4/projects/15/merge_requests/1/approvals": approvedBy(5),
	}
	srv := serve(t, answers)
	a := api(provider.GitLab, srv.URL)
	ctx := context.Background()

	got, err := a.Confirm(ctx, glEvent(provider.ReviewApproved))
	require.NoError(t, err, "bob approved and GitLab lists him")
	assert.Equal(t, provider.AccessWrite, got.Access)
	_, err = a.Confirm(ctx, glEvent(provider.ReviewDismissed))
	assert.ErrorIs(t, err, provider.ErrUnconfirmed, "an unapproval GitLab does not show")

	answers["/api/v4/projects/15/merge_requests/1/approvals"] = approvedBy()
	_, err = a.Confirm(ctx, glEvent(provider.ReviewDismissed))
	require.NoError(t, err, "the unapproval is real")
	replay := glEvent(provider.ReviewApproved)
	replay.Review.ID = 98765 // derived from a new delivery id
	_, err = a.Confirm(ctx, replay)
	assert.ErrorIs(t, err, provider.ErrUnconfirmed, "the replayed approval after the unapproval")

	answers["/api/v4/projects/15/merge_requests/1/approvals"] = approvedBy(5)
	answers["/api/v4/projects/15/members/all/5"] = answer(t, "gitlab-member.json", map[string]any{"access_level": 20})
	_, err = a.Confirm(ctx, glEvent(provider.ReviewApproved))
	assert.ErrorIs(t, err, provider.ErrUnconfirmed, "a Reporter")
	a.GitLabMinAccess = provider.GitLabMaintainer
	answers["/api/v4/projects/15/members/all/5"] = answer(t, "gitlab-member.json", nil)
	_, err = a.Confirm(ctx, glEvent(provider.ReviewApproved))
	assert.ErrorIs(t, err, provider.ErrUnconfirmed, "a Developer when Maintainer is required")
	a.GitLabMinAccess = 0

	delete(answers, "/api/v4/projects/15/members/all/5")
	_, err = a.Confirm(ctx, glEvent(provider.ReviewApproved))
	assert.ErrorIs(t, err, provider.ErrUnconfirmed, "not a member")

	answers["/api/v4/projects/15/members/all/5"] = answer(t, "gitlab-member.json", nil)
	answers["/api/v4/projects/15/merge_requests/1"] = answer(t, "gitlab-merge-request.json", map[string]any{"sha": strings.Repeat("a", 40)})
	_, err = a.Confirm(ctx, glEvent(provider.ReviewApproved))
	assert.ErrorIs(t, err, provider.ErrUnconfirmed, "the merge request moved on since")
}

// TestConfirm_giteaUsesItsOwnReviewID: Gitea's payload has no review id;
// the confirmed review carries Gitea's, so redeliveries map to one Approval.
func TestConfirm_giteaUsesItsOwnReviewID(t *testing.T) {
	srv := serve(t, map[string]any{
		"/api/v1/repos/platform/infra/collaborators/bob/permission": map[string]any{"permission": "write"},
		"/api/v1/repos/platform/infra/pulls/12/reviews":             []any{answer(t, "gitea-review.json", map[string]any{"commit_id": head})},
	})
	ev := ghReviewEvent(555, "bob", provider.ReviewApproved)
	ev.Provider = provider.Gitea
	got, err := api(provider.Gitea, srv.URL).Confirm(context.Background(), ev)
	require.NoError(t, err)
	assert.EqualValues(t, 7, got.ID)
}

// FuzzConfirm: whatever the provider's API answers, Confirm never panics,
// and it confirms a review only with an answer that says so.
func FuzzConfirm(f *testing.F) {
	f.Add(`{"permission":"write"}`, `[{"id":81,"state":"APPROVED","commit_id":"`+head+`","user":{"login":"alice"}}]`)
	f.Add(`{"permission":"read"}`, `[]`)
	f.Add(`{`, `[{"id":"x"}]`)
	f.Add(`{"permission":"admin"}`, `[{"id":81,"user":null}]`)
	f.Fuzz(func(t *testing.T, perm, reviews string) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case strings.HasSuffix(r.URL.Path, "/permission"):
				_, _ = w.Write([]byte(perm))
			case r.URL.Query().Get("page") == "1":
				_, _ = w.Write([]byte(reviews))
			default:
				_, _ = w.Write([]byte("[]"))
			}
		}))
		defer srv.Close()
		got, err := api(provider.GitHub, srv.URL).Confirm(context.Background(), ghReviewEvent(81, "alice", provider.ReviewApproved))
		if err == nil {
			require.NotNil(t, got)
			assert.Contains(t, strings.ToUpper(reviews), `"APPROVED"`)
		}
	})
}
