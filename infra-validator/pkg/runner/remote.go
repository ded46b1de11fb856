package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// RunPath is where a runner Server takes jobs.
const RunPath = "/v1/run"

// Remote sends each job to a runner Server (`infra-validator runner
// serve`), authenticated with a bearer token.
type Remote struct {
	// URL is the runner's base URL, e.g. http://sluice-runner:8090.
	URL string
	// Token is the runner's bearer token.
	Token string
	// Client makes the requests; nil means a client without a timeout
	// (a run is bounded by its Job.Timeout and the caller's context).
	Client *http.Client
}

var _ terraform.Runner = (*Remote)(nil)

// NewRemote checks the URL and returns the client.
func NewRemote(rawURL, token string) (*Remote, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
		return nil, fmt.Errorf("terraform runner URL %q: want http(s)://host[:port] without credentials", rawURL)
	}
	if token == "" {
		return nil, errors.New("terraform runner: no token for the runner")
	}
	return &Remote{URL: strings.TrimSuffix(rawURL, "/"), Token: token}, nil
}

// RunPlan implements terraform.Runner.
func (r *Remote) RunPlan(ctx context.Context, opts terraform.PlanOptions) ([]byte, []byte, error) {
	return runPlan(ctx, r, opts)
}

// RunApply implements terraform.Runner.
func (r *Remote) RunApply(ctx context.Context, opts terraform.ApplyOptions) (terraform.ApplyResult, error) {
	return runApply(ctx, r, opts)
}

// Run sends one job. A runner that cannot be reached is a plain error
// (the job never started); one that goes away after it took the job is
// an error wrapping terraform.ErrRunnerLost.
func (r *Remote) Run(ctx context.Context, job *Job) (*Result, error) {
	body, err := json.Marshal(job)
	if err != nil {
		return nil, fmt.Errorf("terraform runner: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL+RunPath, bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("terraform runner: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+r.Token)
	req.Header.Set("Content-Type", "application/json")
	client := r.Client
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Do(req)
	if err != nil {
		if isDialError(err) {
			return nil, fmt.Errorf("terraform runner %s unreachable: %w", r.URL, err)
		}
		return nil, fmt.Errorf("%w: %s: %s", terraform.ErrRunnerLost, r.URL, terraform.Redact(err.Error(), []string{r.Token}))
	}
	defer func() { _ = resp.Body.Close() }()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxJobBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %s: reading the answer: %v", terraform.ErrRunnerLost, r.URL, err)
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return nil, fmt.Errorf("terraform runner %s refused the token (%s)", r.URL, resp.Status)
	case resp.StatusCode == http.StatusServiceUnavailable:
		return nil, fmt.Errorf("terraform runner %s is busy or stopping (%s)", r.URL, resp.Status)
	case resp.StatusCode == http.StatusBadRequest:
		return nil, fmt.Errorf("terraform runner %s refused the job: %s", r.URL, firstLine(string(data)))
	}
	var res Result
	if resp.StatusCode != http.StatusOK || json.Unmarshal(data, &res) != nil {
		return nil, fmt.Errorf("%w: %s answered %s (%w)", terraform.ErrRunnerLost, r.URL, resp.Status, errNoResult)
	}
	if res.Error != nil {
		return &res, asError(res.Error, job.secrets())
	}
	return &res, nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}
