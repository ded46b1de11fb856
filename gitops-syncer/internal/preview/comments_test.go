package preview_test

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
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
)

// githubAPI is a pull request's comments and check runs behind GitHub's
// REST shapes (docs.github.com: issues/comments, pulls, users,
// checks/runs). hold, when set, keeps every request waiting until it is
// closed; failures answers that many requests with 502 first.
type githubAPI struct {
	mu       sync.Mutex
	comments map[int64]string
	nextID   int64
	checks   int
	edits    int
	failures int
	hold     chan struct{}
	// state is the pull request's state ("open" when empty).
	state string
}

var (
	commentsPath = regexp.MustCompile(`^/repos/[^/]+/[^/]+/issues/[0-9]+/comments$`)
	commentPath  = regexp.MustCompile(`^/repos/[^/]+/[^/]+/issues/comments/([0-9]+)$`)
)

func (g *githubAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	g.mu.Lock()
	hold := g.hold
	g.mu.Unlock()
	if hold != nil {
		<-hold
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failures > 0 {
		g.failures--
		http.Error(w, `{"message":"Server Error"}`, http.StatusBadGateway)
		return
	}
	var in map[string]any
	if r.Method == http.MethodPost || r.Method == http.MethodPatch {
		_ = json.NewDecoder(r.Body).Decode(&in)
	}
	w.Header().Set("Content-Type", "application/json")
	reply := func(status int, v any) {
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	comment := func(id int64) map[string]any {
		return map[string]any{"id": id, "body": g.comments[id], "user": map[string]any{"login": "sluice-bot"}}
	}
	p := r.URL.Path
	switch {
	case strings.HasSuffix(p, "/pulls/"+strings.TrimPrefix(p[strings.LastIndex(p, "/"):], "/")) && strings.Contains(p, "/pulls/"):
		state := g.state
		if state == "" {
			state = "open"
		}
		reply(200, map[string]any{"number": 1, "state": state})
	case p == "/user":
		reply(200, map[string]any{"login": "sluice-bot"})
	case commentsPath.MatchString(p) && r.Method == http.MethodGet:
		out := []any{}
		for id := int64(1); id <= g.nextID; id++ {
			if _, ok := g.comments[id]; ok {
				out = append(out, comment(id))
			}
		}
		reply(200, out)
	case commentsPath.MatchString(p) && r.Method == http.MethodPost:
		g.nextID++
		g.comments[g.nextID] = in["body"].(string)
		reply(201, comment(g.nextID))
	case commentPath.MatchString(p) && r.Method == http.MethodPatch:
		id, _ := strconv.ParseInt(commentPath.FindStringSubmatch(p)[1], 10, 64)
		g.comments[id] = in["body"].(string)
		g.edits++
		reply(200, comment(id))
	case strings.HasSuffix(p, "/check-runs") && r.Method == http.MethodGet:
		reply(200, map[string]any{"total_count": 0, "check_runs": []any{}})
	case strings.HasSuffix(p, "/check-runs") && r.Method == http.MethodPost:
		g.checks++
		reply(201, map[string]any{"id": g.checks, "name": in["name"]})
	default:
		reply(404, map[string]any{"message": "Not Found"})
	}
}

func (g *githubAPI) bodies() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []string
	for id := int64(1); id <= g.nextID; id++ {
		if b, ok := g.comments[id]; ok {
			out = append(out, b)
		}
	}
	return out
}

func withComments(t *testing.T, i *infra) *githubAPI {
	g := &githubAPI{comments: map[int64]string{}}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	i.h.Comments = &provider.API{Provider: provider.GitHub, BaseURL: srv.URL, Token: func(context.Context) (string, error) { return "t0ken-for-tests", nil }}
	i.h.CommentRetry = []time.Duration{0, 0, 0}
	i.h.CheckRuns = true
	return g
}

// TestPullRequest_theReviewCommentShowsWhatIsApprovedAndFollowsPushes:
// the first push creates one comment with each preview's verdict, rendered
// manifest and approvalDigest; the next push edits that comment (never a
// second one) to the new previews' digests; GitHub gets a Check Run per
// release.
func TestPullRequest_theReviewCommentShowsWhatIsApprovedAndFollowsPushes(t *testing.T) {
	i := newInfra(t, "")
	g := withComments(t, i)
	ctx := context.Background()

	first := i.pullRequest(t, 30, i.base, replicas)
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "opened", 30, first, i.base)))
	i.h.WaitComments()
	bodies := g.bodies()
	require.Len(t, bodies, 1)
	for _, cr := range previews(t, i.repo.Namespace, 30) {
		assert.Contains(t, bodies[0], string(cr.Spec.ApprovalDigest), "the digest a review binds to is shown")
		assert.Contains(t, bodies[0], "`"+cr.Spec.Release+"`")
	}
	assert.Contains(t, bodies[0], "+kind: Deployment", "the rendered manifest is shown as a diff")
	assert.Contains(t, bodies[0], "replicas: 3")
	assert.Equal(t, 2, g.checks, "one Check Run per release")
	// The same review is stored beside each preview for kubectl sluice diff.
	for _, cr := range previews(t, i.repo.Namespace, 30) {
		cm := &corev1.ConfigMap{}
		require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: review.ConfigMapName(cr.Name)}, cm))
		s, owned, err := review.FromConfigMap(cm, &cr)
		require.NoError(t, err)
		assert.True(t, owned, "controlled by its preview")
		assert.True(t, s.HasManifest)
		assert.Equal(t, string(cr.Spec.ApprovalDigest), s.Approval.Digest)
	}

	second := i.pullRequest(t, 30, first, map[string]string{"services/cart/values-prod.yaml": "replicaCount: 5\n"})
	require.NoError(t, i.h.PullRequest(ctx, i.repo, githubPR(t, "synchronize", 30, second, i.base)))
	i.h.WaitComments()
	bodies2 := g.bodies()
	require.Len(t, bodies2, 1, "the comment is edited in place, never duplicated")
	assert.Contains(t, bodies2[0], "replicas: 5")
	assert.NotEqual(t, bodies[0], bodies2[0])
}

// TestPullRequest_aFailingProviderNeitherBlocksTheSyncNorLosesTheComment:
// the previews are built and PullRequest returns while GitHub does not
// answer; once it answers, with errors first, the comment is retried
// until it is there.
func TestPullRequest_aFailingProviderNeitherBlocksTheSyncNorLosesTheComment(t *testing.T) {
	i := newInfra(t, "")
	g := withComments(t, i)
	g.hold, g.failures = make(chan struct{}), 2

	head := i.pullRequest(t, 31, i.base, prodReplicas)
	require.NoError(t, i.h.PullRequest(context.Background(), i.repo, githubPR(t, "opened", 31, head, i.base)))
	assert.Len(t, previews(t, i.repo.Namespace, 31), 1, "the preview exists while the provider still has not answered")
	assert.Empty(t, g.bodies())

	g.mu.Lock()
	close(g.hold)
	g.hold = nil
	g.mu.Unlock()
	i.h.WaitComments()
	bodies := g.bodies()
	require.Len(t, bodies, 1, "retried after the provider's errors")
	part, ok := review.PartOf(bodies[0])
	assert.True(t, ok && part == 1, fmt.Sprintf("marked as part 1: %q", bodies[0][:40]))
}
