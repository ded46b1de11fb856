package provider_test

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
)

const (
	ghHead    = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
	giteaHead = "3f1a2b4c5d6e7f8091a2b3c4d5e6f708192a3b4c"
	giteaBase = "9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a291807"
)

func TestParseGitHub_realPayloads(t *testing.T) {
	ev, err := provider.ParseGitHub("pull_request", "d1", providertest.Payload(t, "github/pull_request.opened.payload.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.KindPullRequest, ev.Kind)
	assert.Equal(t, "Codertocat/Hello-World", ev.Repo)
	assert.Equal(t, provider.PullRequest{Action: provider.PROpened, Number: 2, HeadSHA: ghHead, HeadRef: "refs/pull/2/head",
		BaseRef: "refs/heads/master", BaseSHA: "f95f852bd8fca8fcc58a9a2d6c842781e32a215e", Author: "github:codertocat", Sender: "github:codertocat"}, *ev.PullRequest)

	ev, err = provider.ParseGitHub("pull_request", "d2", providertest.Payload(t, "github/pull_request.synchronize.payload.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.PRUpdated, ev.PullRequest.Action)

	ev, err = provider.ParseGitHub("pull_request", "d3", providertest.Payload(t, "github/pull_request.closed.payload.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.PRClosed, ev.PullRequest.Action)
	assert.Equal(t, "c4295bd74fb0f4fda03689c3df3f2803b658fd85", ev.PullRequest.MergeCommitSHA)

	ev, err = provider.ParseGitHub("pull_request_review", "d4", providertest.Payload(t, "github/pull_request_review.submitted.payload.json"))
	require.NoError(t, err)
	require.Equal(t, provider.KindReview, ev.Kind)
	assert.Equal(t, provider.ReviewCommented, ev.Review.State, "the octokit example is a commented review")
	assert.Equal(t, int64(237895671), ev.Review.ID)
	assert.Equal(t, ghHead, ev.Review.CommitSHA)
	assert.Equal(t, "github:codertocat", ev.Review.Reviewer)
	assert.Equal(t, provider.AccessUnknown, ev.Review.Access, "OWNER is a claim the API must confirm")

	ev, err = provider.ParseGitHub("pull_request_review", "d5", providertest.Payload(t, "github/pull_request_review.dismissed.payload.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.ReviewDismissed, ev.Review.State)

	ev, err = provider.ParseGitHub("push", "d6", providertest.Payload(t, "github/push.payload.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.KindPush, ev.Kind)
	assert.Equal(t, "refs/tags/simple-tag", ev.Push.Ref)
	assert.True(t, ev.Push.Deleted, "the example push deletes a tag")
	assert.Equal(t, "github:codertocat", ev.Push.Pusher, "the sender, not the pusher's typed name")

	ev, err = provider.ParseGitHub("ping", "d7", providertest.Payload(t, "github/ping.payload.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.KindPing, ev.Kind)

	ev, err = provider.ParseGitHub("issues", "d8", []byte(`not json`))
	require.NoError(t, err)
	assert.Equal(t, provider.KindIgnored, ev.Kind, "events Sluice does not use are ignored unparsed")
}

func TestParseGitHub_reviewStatesAndAssociations(t *testing.T) {
	base := string(providertest.Payload(t, "github/pull_request_review.submitted.payload.json"))
	cases := []struct {
		name, from, to string
		state          provider.ReviewState
		access         provider.Access
	}{
		{"an approved review approves", `"state": "commented"`, `"state": "approved"`, provider.ReviewApproved, provider.AccessUnknown},
		{"changes requested rejects", `"state": "commented"`, `"state": "changes_requested"`, provider.ReviewChangesRequested, provider.AccessUnknown},
		{"a contributor has no write access", `"author_association": "OWNER"`, `"author_association": "CONTRIBUTOR"`, provider.ReviewCommented, provider.AccessNone},
		{"a member is only a claim (read-only members are members)", `"author_association": "OWNER"`, `"author_association": "MEMBER"`, provider.ReviewCommented, provider.AccessUnknown},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			body := strings.Replace(base, c.from, c.to, 1)
			require.NotEqual(t, base, body)
			ev, err := provider.ParseGitHub("pull_request_review", "x", []byte(body))
			require.NoError(t, err)
			assert.Equal(t, c.state, ev.Review.State)
			assert.Equal(t, c.access, ev.Review.Access)
		})
	}
}

func TestParseGitea_realShapedPayloads(t *testing.T) {
	ev, err := provider.ParseGitea("push", "g1", providertest.Payload(t, "gitea/push.json"))
	require.NoError(t, err)
	assert.Equal(t, &provider.Push{Ref: "refs/heads/main", Before: giteaBase, After: giteaHead, Pusher: "gitea:alice"}, ev.Push)
	assert.Equal(t, "platform/infra", ev.Repo)

	ev, err = provider.ParseGitea("pull_request", "g2", providertest.Payload(t, "gitea/pull_request.opened.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.PullRequest{Action: provider.PROpened, Number: 3, HeadSHA: giteaHead, HeadRef: "refs/pull/3/head",
		BaseRef: "refs/heads/main", BaseSHA: giteaBase, Author: "gitea:alice", Sender: "gitea:alice"}, *ev.PullRequest)

	ev, err = provider.ParseGitea("pull_request", "g3", providertest.Payload(t, "gitea/pull_request.synchronized.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.PRUpdated, ev.PullRequest.Action)

	ev, err = provider.ParseGitea("pull_request", "g4", providertest.Payload(t, "gitea/pull_request.closed.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.PRClosed, ev.PullRequest.Action)
	assert.True(t, ev.PullRequest.Merged)

	ev, err = provider.ParseGitea("pull_request_approved", "g5", providertest.Payload(t, "gitea/pull_request_approved.json"))
	require.NoError(t, err)
	require.Equal(t, provider.KindReview, ev.Kind)
	assert.Equal(t, provider.ReviewApproved, ev.Review.State)
	assert.Equal(t, "gitea:bob", ev.Review.Reviewer)
	assert.Equal(t, giteaHead, ev.Review.CommitSHA)
	assert.Equal(t, provider.AccessUnknown, ev.Review.Access, "Gitea's payload does not say whether the reviewer may write")
	assert.Positive(t, ev.Review.ID)

	again, err := provider.ParseGitea("pull_request_approved", "g5", providertest.Payload(t, "gitea/pull_request_approved.json"))
	require.NoError(t, err)
	assert.Equal(t, ev.Review.ID, again.Review.ID, "a redelivery keeps the derived review id")

	ev, err = provider.ParseGitea("pull_request_rejected", "g6", providertest.Payload(t, "gitea/pull_request_rejected.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.ReviewChangesRequested, ev.Review.State)
}

func TestParseGitLab_realShapedPayloads(t *testing.T) {
	ev, err := provider.ParseGitLab("Push Hook", "l1", providertest.Payload(t, "gitlab/push.json"))
	require.NoError(t, err)
	assert.Equal(t, &provider.Push{Ref: "refs/heads/main", Before: giteaBase, After: giteaHead, Pusher: "gitlab:alice"}, ev.Push)
	assert.Equal(t, int64(15), ev.ProjectID)

	ev, err = provider.ParseGitLab("Merge Request Hook", "l2", providertest.Payload(t, "gitlab/merge_request.open.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.PullRequest{Action: provider.PROpened, Number: 1, HeadSHA: giteaHead, HeadRef: "refs/merge-requests/1/head",
		BaseRef: "refs/heads/main", Author: "gitlab:alice", Sender: "gitlab:alice"}, *ev.PullRequest)

	ev, err = provider.ParseGitLab("Merge Request Hook", "l3", providertest.Payload(t, "gitlab/merge_request.update.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.PRUpdated, ev.PullRequest.Action)

	ev, err = provider.ParseGitLab("Merge Request Hook", "l4", providertest.Payload(t, "gitlab/merge_request.merge.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.PRClosed, ev.PullRequest.Action)
	assert.True(t, ev.PullRequest.Merged)

	ev, err = provider.ParseGitLab("Merge Request Hook", "l5", providertest.Payload(t, "gitlab/merge_request.approval.json"))
	require.NoError(t, err)
	require.Equal(t, provider.KindReview, ev.Kind)
	assert.Equal(t, provider.ReviewApproved, ev.Review.State)
	assert.Equal(t, "gitlab:bob", ev.Review.Reviewer)
	assert.Equal(t, provider.AccessUnknown, ev.Review.Access, "GitLab's approvals API decides")
	assert.EqualValues(t, 5, ev.Review.UserID)

	ev, err = provider.ParseGitLab("Merge Request Hook", "l6", providertest.Payload(t, "gitlab/merge_request.unapproval.json"))
	require.NoError(t, err)
	assert.Equal(t, provider.ReviewDismissed, ev.Review.State, "an unapproval withdraws like a dismissed review")
}

func TestVerify_forgedMissingAndWrongSignaturesFail(t *testing.T) {
	body := providertest.Payload(t, "github/pull_request.opened.payload.json")
	secret := []byte("s3cr3t-token")
	for _, p := range []provider.Name{provider.GitHub, provider.Gitea, provider.GitLab, provider.Generic} {
		t.Run(string(p), func(t *testing.T) {
			h := http.Header{}
			name, value := provider.Sign(p, body, secret)
			h.Set(name, value)
			require.NoError(t, provider.Verify(p, h, body, secret))

			assert.ErrorIs(t, provider.Verify(p, http.Header{}, body, secret), provider.ErrSignature, "missing")
			assert.ErrorIs(t, provider.Verify(p, h, body, []byte("other")), provider.ErrSignature, "other secret")
			assert.ErrorIs(t, provider.Verify(p, h, body, nil), provider.ErrSignature, "no secret never verifies")
			if p != provider.GitLab {
				tampered := append([]byte{}, body...)
				tampered[10] ^= 1
				assert.ErrorIs(t, provider.Verify(p, h, tampered, secret), provider.ErrSignature, "changed body")
				forged := http.Header{}
				forged.Set(name, strings.Repeat("0", len(value)))
				assert.ErrorIs(t, provider.Verify(p, forged, body, secret), provider.ErrSignature, "forged")
			}
		})
	}
}

func TestDetect_giteaBeforeGitHub(t *testing.T) {
	h := http.Header{}
	h.Set("X-GitHub-Event", "push")
	h.Set("X-Gitea-Event", "push")
	p, err := provider.Detect(h)
	require.NoError(t, err)
	assert.Equal(t, provider.Gitea, p)
	_, err = provider.Detect(http.Header{})
	assert.ErrorIs(t, err, provider.ErrUnknownProvider)
}

func TestParse_badPayloadsAreErrors(t *testing.T) {
	cases := map[string]func() error{
		"a GitHub push with a relative ref": func() error {
			_, err := provider.ParseGitHub("push", "", []byte(`{"ref":"main","after":"`+ghHead+`","repository":{"full_name":"a/b"}}`))
			return err
		},
		"a GitHub review without commit": func() error {
			_, err := provider.ParseGitHub("pull_request_review", "", []byte(`{"action":"submitted","repository":{"full_name":"a/b"},"pull_request":{"number":1,"head":{"sha":"`+ghHead+`"},"base":{"ref":"main"}},"review":{"id":1,"state":"approved","user":{"login":"x"}}}`))
			return err
		},
		"a GitLab merge request without project": func() error {
			_, err := provider.ParseGitLab("Merge Request Hook", "", []byte(`{"object_kind":"merge_request"}`))
			return err
		},
		"a Gitea review with a user name holding a colon": func() error {
			body := strings.Replace(string(providertest.Payload(t, "gitea/pull_request_approved.json")), `"login": "bob"`, `"login": "bob:admin"`, 1)
			_, err := provider.ParseGitea("pull_request_approved", "x", []byte(body))
			return err
		},
		"a generic push that is not JSON": func() error {
			_, err := provider.ParseGeneric("push", "", []byte(`{`))
			return err
		},
	}
	for name, run := range cases {
		t.Run(name, func(t *testing.T) {
			assert.ErrorIs(t, run(), provider.ErrPayload)
		})
	}
}

// checkEvent asserts the invariants every parsed event keeps.
func checkEvent(t *testing.T, ev *provider.Event) {
	// Event types and review bodies reach metrics, traces and status: a
	// cut inside a character would make them invalid UTF-8.
	require.True(t, utf8.ValidString(ev.Type), "event type %q", ev.Type)
	if ev.Review != nil {
		require.True(t, utf8.ValidString(ev.Review.Body), "review body %q", ev.Review.Body)
	}
	switch ev.Kind {
	case provider.KindPush:
		require.NotNil(t, ev.Push)
		require.True(t, strings.HasPrefix(ev.Push.Ref, "refs/"))
		if !ev.Push.Deleted {
			require.Len(t, ev.Push.After, 40)
		}
	case provider.KindPullRequest:
		require.NotNil(t, ev.PullRequest)
		require.Positive(t, ev.PullRequest.Number)
	case provider.KindReview:
		require.NotNil(t, ev.Review)
		require.Positive(t, ev.Review.ID)
		require.NotEmpty(t, ev.Review.Reviewer)
		require.GreaterOrEqual(t, len(ev.Review.CommitSHA), 40)
	}
}

func fuzzSeeds(f *testing.F, events map[string]string) {
	for event, file := range events {
		f.Add(event, providertest.Payload(f, file))
	}
	f.Add("push", []byte(`{}`))
	f.Add(strings.Repeat("a", 63)+"é", []byte(`{}`))
	f.Add("push", []byte(`null`))
	f.Add("push", []byte(`{"ref":"refs/heads/../x","after":"0000000000000000000000000000000000000000"}`))
}

func FuzzParseGitHub(f *testing.F) {
	fuzzSeeds(f, map[string]string{
		"push": "github/push.payload.json", "pull_request": "github/pull_request.opened.payload.json",
		"pull_request_review": "github/pull_request_review.dismissed.payload.json", "ping": "github/ping.payload.json",
	})
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		ev, err := provider.ParseGitHub(event, "id", body)
		if err == nil {
			checkEvent(t, ev)
		}
	})
}

func FuzzParseGitea(f *testing.F) {
	fuzzSeeds(f, map[string]string{
		"push": "gitea/push.json", "pull_request": "gitea/pull_request.closed.json",
		"pull_request_approved": "gitea/pull_request_approved.json", "pull_request_rejected": "gitea/pull_request_rejected.json",
	})
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		ev, err := provider.ParseGitea(event, "id", body)
		if err == nil {
			checkEvent(t, ev)
		}
	})
}

func FuzzParseGitLab(f *testing.F) {
	fuzzSeeds(f, map[string]string{
		"Push Hook": "gitlab/push.json", "Merge Request Hook": "gitlab/merge_request.approval.json",
	})
	f.Add("Merge Request Hook", providertest.Payload(f, "gitlab/merge_request.merge.json"))
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		ev, err := provider.ParseGitLab(event, "id", body)
		if err == nil {
			checkEvent(t, ev)
		}
	})
}

func FuzzParseGeneric(f *testing.F) {
	f.Add("push", []byte(`{"ref":"refs/heads/main","after":"`+ghHead+`"}`))
	f.Add("ping", []byte(``))
	f.Fuzz(func(t *testing.T, event string, body []byte) {
		ev, err := provider.ParseGeneric(event, "id", body)
		if err == nil {
			checkEvent(t, ev)
		}
	})
}

func FuzzVerify(f *testing.F) {
	f.Add("github", "sha256=00", []byte("{}"), []byte("k"))
	f.Add("gitlab", "k", []byte("{}"), []byte("k"))
	f.Fuzz(func(t *testing.T, p, sig string, body, secret []byte) {
		h := http.Header{}
		for _, name := range []string{"X-Hub-Signature-256", "X-Gitea-Signature", "X-Gitlab-Token", provider.HeaderGenericSignature} {
			h.Set(name, sig)
		}
		_ = provider.Verify(provider.Name(p), h, body, secret)
	})
}
