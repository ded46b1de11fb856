package status_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/status"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const (
	token = "tok-3xq9-super-secret"
	head  = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
)

type call struct {
	method, path string
	header       http.Header
	body         map[string]string
}

// api is an httptest server recording every call.
type api struct {
	*httptest.Server
	mu    sync.Mutex
	calls []call
}

func newAPI(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) *api {
	a := &api{}
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		c := call{method: r.Method, path: r.URL.Path, header: r.Header.Clone()}
		if len(data) > 0 {
			require.NoError(t, json.Unmarshal(data, &c.body))
		}
		a.mu.Lock()
		a.calls = append(a.calls, c)
		a.mu.Unlock()
		answer(w, r)
	}))
	t.Cleanup(a.Close)
	return a
}

func created(w http.ResponseWriter, _ *http.Request) {
	w.WriteHeader(http.StatusCreated)
	_, _ = io.WriteString(w, `{"id":1}`)
}

// preview is a ChangeRequest whose findings quote secret-looking values.
func preview(result sluicev1.VerdictResult) *sluicev1.ChangeRequest {
	return &sluicev1.ChangeRequest{Spec: sluicev1.ChangeRequestSpec{
		Release: "checkout-prod",
		Verdict: sluicev1.Verdict{Result: result, Risk: sluicev1.RiskMedium, Findings: []sluicev1.Finding{
			{Severity: sluicev1.SeverityDeny, Message: "password=hunter2 in values-prod.yaml; token " + token},
			{Severity: sluicev1.SeverityWarn, Message: "AWS_SECRET_ACCESS_KEY=abc"},
		}},
		PlanSummary: &sluicev1.PlanSummary{Add: 1},
	}}
}

func TestPost_eachProviderGetsTheRightStateAndNoSecret(t *testing.T) {
	cases := []struct {
		provider  provider.Name
		result    sluicev1.VerdictResult
		path      string
		state     string
		authKey   string
		authValue string
		nameKey   string
	}{
		{provider.GitHub, sluicev1.VerdictFail, "/repos/platform/infra/statuses/" + head, "failure", "Authorization", "Bearer " + token, "context"},
		{provider.GitHub, sluicev1.VerdictPass, "/repos/platform/infra/statuses/" + head, "success", "Authorization", "Bearer " + token, "context"},
		{provider.Gitea, sluicev1.VerdictFail, "/api/v1/repos/platform/infra/statuses/" + head, "failure", "Authorization", "token " + token, "context"},
		{provider.Gitea, sluicev1.VerdictWarn, "/api/v1/repos/platform/infra/statuses/" + head, "success", "Authorization", "token " + token, "context"},
		{provider.GitLab, sluicev1.VerdictFail, "/api/v4/projects/15/statuses/" + head, "failed", "Private-Token", token, "name"},
		{provider.GitLab, sluicev1.VerdictPass, "/api/v4/projects/15/statuses/" + head, "success", "Private-Token", token, "name"},
	}
	for _, c := range cases {
		t.Run(string(c.provider)+" "+string(c.result), func(t *testing.T) {
			srv := newAPI(t, created)
			cl, err := status.New(c.provider, srv.URL, token)
			require.NoError(t, err)
			cr := preview(c.result)
			state, ctxName, desc := status.ForChangeRequest(cr)
			require.NoError(t, cl.Post(context.Background(), status.Status{Repo: "platform/infra", ProjectID: 15, SHA: head,
				Context: ctxName, State: state, Description: desc}))
			require.Len(t, srv.calls, 1)
			got := srv.calls[0]
			assert.Equal(t, http.MethodPost, got.method)
			assert.Equal(t, c.path, got.path)
			assert.Equal(t, c.state, got.body["state"])
			assert.Equal(t, "sluice/checkout-prod", got.body[c.nameKey])
			assert.Equal(t, c.authValue, got.header.Get(c.authKey))
			assert.Contains(t, got.body["description"], string(c.result)+", risk medium")
			for _, secret := range []string{token, "hunter2", "password", "AWS_SECRET", "abc"} {
				assert.NotContains(t, got.body["description"], secret)
			}
			assert.NotContains(t, got.body["description"], "\n")
		})
	}
}

func TestPost_errorsCarryNoToken(t *testing.T) {
	srv := newAPI(t, func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = io.WriteString(w, `{"message":"Bad credentials for `+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+`"}`)
	})
	cl, err := status.New(provider.GitHub, srv.URL, token)
	require.NoError(t, err)
	err = cl.Post(context.Background(), status.Status{Repo: "platform/infra", SHA: head, Context: "sluice/x", State: status.StatePending})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "HTTP 401")
	assert.NotContains(t, err.Error(), token)

	err = cl.Post(context.Background(), status.Status{Repo: "platform/infra", SHA: "not-a-sha", State: status.StatePending})
	assert.ErrorContains(t, err, "is not a commit")
	err = cl.Post(context.Background(), status.Status{Repo: "../../admin", SHA: head, State: status.StatePending})
	assert.Error(t, err)
}

func TestNew_refusesBadConfiguration(t *testing.T) {
	_, err := status.New(provider.Gitea, "", token)
	assert.Error(t, err, "Gitea needs a base URL")
	_, err = status.New(provider.GitHub, "ftp://x", token)
	assert.Error(t, err)
	_, err = status.New(provider.GitHub, "https://api.example.com", "")
	assert.Error(t, err)
	_, err = status.New(provider.Generic, "https://x", token)
	assert.Error(t, err)
}
