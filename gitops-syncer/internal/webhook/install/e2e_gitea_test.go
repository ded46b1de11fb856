package install_test

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/preview"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/giteatest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/webhook/install"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// confirmations records what the provider's API said about each review
// the syncer asked it about, so a test can wait until a review that must
// not count has been judged, instead of waiting for nothing to happen.
type confirmations struct {
	inner preview.ReviewConfirmer
	mu    sync.Mutex
	// by reviewer identity: the errors of every confirmation (nil: counted).
	got map[string][]error
}

func (c *confirmations) Confirm(ctx context.Context, ev *provider.Event) (*provider.Review, error) {
	rev, err := c.inner.Confirm(ctx, ev)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[ev.Review.Reviewer] = append(c.got[ev.Review.Reviewer], err)
	return rev, err
}

// unconfirmed reports whether a review by reviewer was judged not to count.
func (c *confirmations) unconfirmed(reviewer string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, err := range c.got[reviewer] {
		if errors.Is(err, provider.ErrUnconfirmed) {
			return true
		}
	}
	return false
}

// giteaWorld is a running syncer whose Repository lives on a real Gitea:
// the syncer clones it over smart HTTP, Gitea's own signed webhooks
// (installed through Gitea's API) reach the receiver, and the syncer posts
// statuses and comments and confirms reviews through Gitea's API as the
// bot user.
type giteaWorld struct {
	f       *giteatest.Forge
	ns      string
	git     *gittest.Repo
	repo    *sluicev1.Repository
	base    string
	in      *install.Installed
	reviews *confirmations
}

func newGiteaWorld(t *testing.T) *giteaWorld {
	f := giteatest.Start(t)
	ctx := context.Background()
	ns := env.Namespace(t, "gitea-")

	g := gittest.NewRepo(t, t.TempDir(), "infra")
	g.CopyDir(filepath.Join(root, "charts", "service"), "charts/service")
	g.CopyDir(filepath.Join(root, "services", "cart"), "services/cart")
	base := g.Commit("services", "platform@example.com")
	f.Push(t, g.GitDir, f.Author, "refs/heads/main:refs/heads/main")

	s, err := syncer.New(env.Config, syncer.Options{ArtifactAddr: "127.0.0.1:0", ArtifactToken: artifact.StaticToken("artifact-token-of-the-gitea-tests"), DataDir: t.TempDir(),
		Namespaces: []string{ns}, Validator: validator, SkipNameValidation: true})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gitea-token"},
		Data: map[string][]byte{"token": []byte(f.Bot.Token)}}))
	in, err := install.Install(s, install.Options{Listener: ln, SkipNameValidation: true, StatusProvider: provider.Gitea, StatusBaseURL: f.URL,
		StatusTokenSecret: types.NamespacedName{Namespace: ns, Name: "gitea-token"}})
	require.NoError(t, err)
	reviews := &confirmations{inner: in.Previews.Reviews, got: map[string][]error{}}
	in.Previews.Reviews = reviews
	testenv.Go(t, s)

	secret := "webhook-secret-" + ns
	require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infra-webhook"},
		Data: map[string][]byte{webhook.SecretKey: []byte(secret)}}))
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infra"}, Spec: sluicev1.RepositorySpec{
		URL: f.CloneURL(), TargetNamespaces: []string{"cart-*"}, ServiceAccountName: "deployer",
		Interval: &metav1.Duration{Duration: time.Hour}, WebhookSecretRef: &sluicev1.LocalObjectReference{Name: "infra-webhook"},
	}}
	require.NoError(t, k8s.Create(ctx, repo))
	var hookURL string
	require.Eventually(t, func() bool {
		got := &sluicev1.Repository{}
		if err := k8s.Get(ctx, client.ObjectKeyFromObject(repo), got); err != nil {
			return false
		}
		hookURL = "http://" + ln.Addr().String() + got.Status.WebhookPath
		return got.Status.WebhookPath != "" && got.Status.LastSyncedCommit == base
	}, 2*time.Minute, 20*time.Millisecond, "the Repository got no webhook path or first sync from Gitea")

	// The hook, installed through Gitea's API as a user would; and one
	// with a wrong secret to the same path, which must be refused.
	f.Hook(t, hookURL, secret)
	f.Hook(t, hookURL, "not-the-secret")
	return &giteaWorld{f: f, ns: ns, git: g, repo: repo, base: base, in: in, reviews: reviews}
}

// requests is the receiver's count of Gitea deliveries of event with result.
func (w *giteaWorld) requests(t *testing.T, event, result string) float64 {
	var m dto.Metric
	require.NoError(t, w.in.Metrics.Requests.WithLabelValues(string(provider.Gitea), event, result).(prometheus.Metric).Write(&m))
	return m.GetCounter().GetValue()
}

// changeRequest waits for the named ChangeRequest.
func (w *giteaWorld) changeRequest(t *testing.T, name string) *sluicev1.ChangeRequest {
	cr := &sluicev1.ChangeRequest{}
	require.Eventually(t, func() bool {
		return k8s.Get(context.Background(), client.ObjectKey{Namespace: w.ns, Name: name}, cr) == nil
	}, 2*time.Minute, 10*time.Millisecond, "ChangeRequest %s never appeared", name)
	return cr
}

// approvals lists the Approvals of digest.
func (w *giteaWorld) approvals(t *testing.T, digest sluicev1.Digest) []sluicev1.Approval {
	var list sluicev1.ApprovalList
	require.NoError(t, k8s.List(context.Background(), &list, client.InNamespace(w.ns)))
	var out []sluicev1.Approval
	for _, a := range list.Items {
		if a.Spec.ApprovalDigest == digest {
			out = append(out, a)
		}
	}
	return out
}

// status waits for Gitea to hold the commit status context on sha.
func (w *giteaWorld) status(t *testing.T, sha, context string) *gitea.Status {
	var found *gitea.Status
	require.Eventually(t, func() bool {
		list, _, err := w.f.Client(t, w.f.Author).ListStatuses(giteatest.Org, giteatest.Repo, sha, gitea.ListStatusesOption{})
		if err != nil {
			return false
		}
		for _, s := range list {
			if s.Context == context {
				found = s
				return true
			}
		}
		return false
	}, 2*time.Minute, 20*time.Millisecond, "no commit status %s on %s", context, sha)
	return found
}

// comments are the pull request's comments as Gitea lists them.
func (w *giteaWorld) comments(t *testing.T, n int64) []*gitea.Comment {
	list, _, err := w.f.Client(t, w.f.Author).ListIssueComments(giteatest.Org, giteatest.Repo, n, gitea.ListIssueCommentOptions{})
	require.NoError(t, err)
	return list
}

// commit commits files on top of from on branch and pushes the branch to
// Gitea as the author; main stays where it was locally.
func (w *giteaWorld) commit(t *testing.T, branch, from string, files map[string]string) string {
	main := w.git.Head("main")
	w.git.SetBranch(branch, from)
	for p, c := range files {
		w.git.WriteFile(p, c)
	}
	sha := w.git.Commit("change "+branch, "author@example.com")
	w.f.Push(t, w.git.GitDir, w.f.Author, "+refs/heads/"+branch+":refs/heads/"+branch)
	if branch != "main" {
		w.git.SetBranch("main", main)
	}
	return sha
}

// TestGitea_pushPullRequestReviewAndMergeThroughARealForge is the promise
// with a real Gitea in front of the syncer: Gitea's signed push reaches
// the receiver (a hook with a wrong secret is refused), a pull request
// gets its preview, its commit status and its review comment (edited in
// place when the pull request moves), the approver's approving review
// becomes the Approval of that preview (the author's and an outsider's do
// not), and the merge commit Gitea makes carries the reviewed digest.
func TestGitea_pushPullRequestReviewAndMergeThroughARealForge(t *testing.T) {
	w := newGiteaWorld(t)
	f := w.f

	// A push to main: the webhook, not the hour-long poll, makes the change.
	// (A refused delivery is counted before its event is known.)
	unauthorized := w.requests(t, "unknown", "unauthorized")
	c1 := w.commit(t, "main", w.base, map[string]string{prodValues: "replicaCount: 7\n"})
	pushed := w.changeRequest(t, sluicev1.ChangeRequestName("cart-prod", c1, 1))
	assert.Contains(t, pushed.Spec.Pushers, sluicev1.Identity("gitea:author"), "the pusher Gitea authenticated")
	require.Eventually(t, func() bool { return w.requests(t, "unknown", "unauthorized") >= unauthorized+1 },
		2*time.Minute, 20*time.Millisecond, "the delivery signed with the wrong secret was refused")

	// A pull request: its preview, commit status and review comment.
	h1 := w.commit(t, "feature", c1, map[string]string{prodValues: "replicaCount: 3\n"})
	pr := f.OpenPullRequest(t, "feature", "scale cart in prod")
	p1 := w.changeRequest(t, sluicev1.PreviewChangeRequestName("cart-prod", pr.Index, h1))
	require.True(t, p1.Spec.PullRequest.Preview)
	assert.Equal(t, h1, p1.Spec.Revision)
	st := w.status(t, h1, "sluice/cart-prod")
	wantState := gitea.StatusSuccess
	if p1.Spec.Verdict.Result == sluicev1.VerdictFail {
		wantState = gitea.StatusFailure
	}
	assert.Equal(t, wantState, st.State)
	assert.Equal(t, f.Bot.Name, st.Creator.UserName)
	var comment *gitea.Comment
	require.Eventually(t, func() bool {
		for _, c := range w.comments(t, pr.Index) {
			if strings.Contains(c.Body, sluicev1.ShortSHA(h1)) {
				comment = c
				return true
			}
		}
		return false
	}, 2*time.Minute, 20*time.Millisecond, "no review comment of %s", h1)
	assert.True(t, strings.HasPrefix(comment.Body, "<!-- sluice:review part=1 -->"), comment.Body)
	assert.Contains(t, comment.Body, "`cart-prod`")
	assert.Equal(t, f.Bot.Name, comment.Poster.UserName)

	// A new commit on the pull request: a new preview, and the same
	// comment edited to it.
	h2 := w.commit(t, "feature", h1, map[string]string{prodValues: "replicaCount: 4\n"})
	p2 := w.changeRequest(t, sluicev1.PreviewChangeRequestName("cart-prod", pr.Index, h2))
	require.NotEqual(t, p1.Spec.ApprovalDigest, p2.Spec.ApprovalDigest)
	assert.Equal(t, sluicev1.Identity("gitea:author"), p2.Spec.PullRequestAuthor)
	assert.Contains(t, p2.Spec.Pushers, sluicev1.Identity("gitea:author"))
	w.status(t, h2, "sluice/cart-prod")
	require.Eventually(t, func() bool {
		list := w.comments(t, pr.Index)
		return len(list) == 1 && list[0].ID == comment.ID && strings.Contains(list[0].Body, sluicev1.ShortSHA(h2))
	}, 2*time.Minute, 20*time.Millisecond, "the review comment was not edited in place to %s", h2)

	// The author cannot approve their own pull request (Gitea refuses);
	// an outsider's approval reaches the syncer and does not count.
	_, resp, err := f.Client(t, f.Author).CreatePullReview(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, CommitID: h2})
	require.Error(t, err)
	require.Equal(t, 422, resp.StatusCode)
	_, _, err = f.Client(t, f.Outsider).CreatePullReview(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, CommitID: h2})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return w.reviews.unconfirmed("gitea:outsider") }, 2*time.Minute, 20*time.Millisecond,
		"the outsider's review was never judged")
	assert.Empty(t, w.approvals(t, p2.Spec.ApprovalDigest), "an outsider's approval is no Approval")

	// The approver approves the head: the Approval of that preview, by
	// that person, for that pull request and review.
	rv, _, err := f.Client(t, f.Approver).CreatePullReview(giteatest.Org, giteatest.Repo, pr.Index, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "lgtm", CommitID: h2})
	require.NoError(t, err)
	var got []sluicev1.Approval
	require.Eventually(t, func() bool {
		got = w.approvals(t, p2.Spec.ApprovalDigest)
		return len(got) > 0
	}, 2*time.Minute, 20*time.Millisecond, "the approving review became no Approval")
	require.Len(t, got, 1)
	a := got[0].Spec
	assert.Equal(t, sluicev1.Identity("gitea:approver"), a.Approver)
	assert.Equal(t, sluicev1.DecisionApprove, a.Decision)
	assert.Equal(t, sluicev1.SourcePullRequest, a.Source)
	assert.Equal(t, pr.Index, a.PullRequest)
	assert.Equal(t, preview.ApprovalName("cart-prod", pr.Index, rv.ID, sluicev1.DecisionApprove), got[0].Name, "keyed by Gitea's review id")
	assert.Empty(t, w.approvals(t, p1.Spec.ApprovalDigest), "the older head is not approved")

	// The merge: Gitea's merge commit has the reviewed content, so its
	// change has the preview's digest and the approval applies to it.
	m := f.Merge(t, pr.Index)
	merged := w.changeRequest(t, sluicev1.ChangeRequestName("cart-prod", m, 1))
	assert.Nil(t, merged.Spec.PullRequest)
	assert.Equal(t, sluicev1.Identity("gitea:author"), merged.Spec.PullRequestAuthor, "merged through the previewed pull request")
	assert.Contains(t, merged.Spec.MergedPullRequests, pr.Index)
	assert.Equal(t, p2.Spec.ApprovalDigest, merged.Spec.ApprovalDigest, "the merge commit carries exactly the reviewed content")
	assert.Len(t, w.approvals(t, merged.Spec.ApprovalDigest), 1)
}
