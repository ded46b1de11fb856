package preview

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Commenter keeps a pull request's Sluice comments current
// (provider.API).
type Commenter interface {
	SyncComments(ctx context.Context, t provider.Thread, bodies []string) (provider.CommentResult, error)
	SyncCheckRun(ctx context.Context, c provider.Check) error
	CommentLimit() int
}

// DefaultCommentRetry is how long a failed comment update waits before
// each further attempt.
var DefaultCommentRetry = []time.Duration{5 * time.Second, 30 * time.Second, 2 * time.Minute, 10 * time.Minute}

// commentJob is what one pull request's comments should say now.
type commentJob struct {
	thread provider.Thread
	bodies []string
	checks []provider.Check
}

// publisher posts comments in the background, one worker per pull
// request: a provider that is down never holds back a sync, and a newer
// job replaces one still waiting for a retry.
type publisher struct {
	mu      sync.Mutex
	pending map[string]commentJob
	running map[string]bool
	// posted is the job last posted per pull request: the same job again
	// (an approval change that reads the same) writes nothing.
	posted map[string]commentJob
	wg     sync.WaitGroup
}

// reviewInputs remembers, per preview, what its review is rendered from
// beyond the ChangeRequest (the plan, the manifests, the risk reasons),
// from when it was validated.
type reviewInputs struct {
	sync.Map // ChangeRequest name → review.Input
}

// publishReview renders the review of the previews at head and hands it
// to the background publisher; it remembers the pull request's thread, so
// an approval arriving later renders the comment again (RefreshApprovals).
func (h *Handler) publishReview(ctx context.Context, repo *sluicev1.Repository, ev *provider.Event, pr *provider.PullRequest, previews []built) {
	if h.Comments == nil || ev == nil {
		return
	}
	crs := make([]*sluicev1.ChangeRequest, 0, len(previews))
	for _, b := range previews {
		crs = append(crs, b.cr)
	}
	t := commentThread{Thread: provider.Thread{Repo: ev.Repo, ProjectID: ev.ProjectID, Number: pr.Number}, head: pr.HeadSHA}
	h.threads.Store(threadKey(repo.Namespace, repo.Name, pr.Number), t)
	h.submitReview(ctx, t, crs)
}

// commentThread is where a pull request's comment goes and the head its
// previews were built at.
type commentThread struct {
	provider.Thread
	head string
}

func threadKey(ns, repo string, pr int64) string { return fmt.Sprintf("%s/%s#%d", ns, repo, pr) }

// submitReview renders the sections of crs (the previews of one pull
// request at one head) and hands the comment to the publisher.
func (h *Handler) submitReview(ctx context.Context, t commentThread, crs []*sluicev1.ChangeRequest) {
	sort.Slice(crs, func(i, j int) bool { return crs[i].Spec.Release < crs[j].Spec.Release })
	var sections []*review.Section
	var checks []provider.Check
	for _, cr := range crs {
		s, err := h.sectionOf(ctx, cr)
		if err != nil {
			h.Log.Error(err, "Rendering the review failed", "changeRequest", cr.Name)
			continue
		}
		sections = append(sections, s)
		if h.CheckRuns {
			checks = append(checks, checkOf(t.Repo, t.head, s))
		}
	}
	job := commentJob{
		thread: t.Thread,
		bodies: review.Markdown(sections, h.Comments.CommentLimit(), 0),
		checks: checks,
	}
	h.pub.submit(h, fmt.Sprintf("%s#%d", t.Repo, t.Number), job)
}

// sectionOf is the review section of cr with its approval state as cr
// records it: rendered from the inputs kept since its validation, or
// read from the ConfigMap stored beside it (after a restart), or from the
// ChangeRequest alone.
func (h *Handler) sectionOf(ctx context.Context, cr *sluicev1.ChangeRequest) (*review.Section, error) {
	if v, ok := h.inputs.Load(cr.Namespace + "/" + cr.Name); ok {
		in := v.(review.Input)
		in.Change = cr
		return review.Build(in)
	}
	cm := &corev1.ConfigMap{}
	err := h.reader().Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: review.ConfigMapName(cr.Name)}, cm)
	if err == nil {
		s, owned, err := review.FromConfigMap(cm, cr)
		if err != nil {
			return nil, err
		}
		if owned && !s.Trimmed {
			return review.WithApproval(s, cr), nil
		}
	} else if !apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("read the review of %s: %w", cr.Name, err)
	}
	return review.Build(review.Input{Change: cr})
}

// RefreshApprovals renders the comment of cr's pull request again when cr
// is a preview at the head the comment shows: its approval state (who
// approved, who is still needed, the phase) changed. Nothing is posted
// when the comment reads the same (the publisher compares with what it
// posted last), nor for a pull request this process has not commented on
// since it started (its next push renders it).
func (h *Handler) RefreshApprovals(ctx context.Context, cr *sluicev1.ChangeRequest) error {
	pr := cr.Spec.PullRequest
	repoName := cr.Labels[sluicev1.LabelRepository]
	if h.Comments == nil || pr == nil || !pr.Preview || repoName == "" {
		return nil
	}
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: cr.Namespace, Name: repoName}}
	unlock := h.lock(repo, pr.Number)
	defer unlock()
	v, ok := h.threads.Load(threadKey(cr.Namespace, repoName, pr.Number))
	if !ok {
		return nil
	}
	t := v.(commentThread)
	if t.head != pr.HeadSHA {
		return nil // an older push's preview: the comment shows a newer one
	}
	crs, err := h.previewsAt(ctx, repo, pr.Number, t.head)
	if err != nil {
		return err
	}
	if len(crs) > 0 {
		h.submitReview(ctx, t, crs)
	}
	return nil
}

// RefreshMerged renders again the comment of each pull request whose
// merge the branch change cr applied (spec.mergedPullRequests), once its
// verification moved on: the comment then shows the changes of the
// tracked branch that merged it (every release's, at cr's revision) with
// their verification and measurements, in place of the previews, which
// the merge removed. Like RefreshApprovals it writes only to a pull
// request this process has commented on since it started, and nothing
// when the comment reads the same.
func (h *Handler) RefreshMerged(ctx context.Context, cr *sluicev1.ChangeRequest) error {
	repoName := cr.Labels[sluicev1.LabelRepository]
	if h.Comments == nil || isPreview(cr) || len(cr.Spec.MergedPullRequests) == 0 || repoName == "" {
		return nil
	}
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: cr.Namespace, Name: repoName}}
	for _, n := range cr.Spec.MergedPullRequests {
		if err := h.refreshMerged(ctx, repo, cr.Spec.Revision, n); err != nil {
			return err
		}
	}
	return nil
}

// refreshMerged renders pull request n's comment from the branch changes
// at revision that merged it.
func (h *Handler) refreshMerged(ctx context.Context, repo *sluicev1.Repository, revision string, n int64) error {
	unlock := h.lock(repo, n)
	defer unlock()
	v, ok := h.threads.Load(threadKey(repo.Namespace, repo.Name, n))
	if !ok {
		return nil
	}
	t := v.(commentThread)
	var list sluicev1.ChangeRequestList
	if err := h.Client.List(ctx, &list, client.InNamespace(repo.Namespace), client.MatchingLabels{sluicev1.LabelRepository: repo.Name}); err != nil {
		return fmt.Errorf("list the changes that merged pull request %d: %w", n, err)
	}
	var crs []*sluicev1.ChangeRequest
	for i := range list.Items {
		c := &list.Items[i]
		if !isPreview(c) && c.Spec.Revision == revision && slices.Contains(c.Spec.MergedPullRequests, n) {
			crs = append(crs, c)
		}
	}
	if len(crs) == 0 {
		return nil
	}
	t.Merged = true
	sort.Slice(crs, func(i, j int) bool { return crs[i].Spec.Release < crs[j].Spec.Release })
	var sections []*review.Section
	for _, c := range crs {
		s, err := h.sectionOf(ctx, c)
		if err != nil {
			return fmt.Errorf("render the review of %s: %w", c.Name, err)
		}
		sections = append(sections, s)
	}
	h.pub.submit(h, fmt.Sprintf("%s#%d", t.Repo, t.Number), commentJob{
		thread: t.Thread,
		bodies: review.Markdown(sections, h.Comments.CommentLimit(), 0),
	})
	return nil
}

// checkOf is the Check Run of one release's section.
func checkOf(repo, head string, s *review.Section) provider.Check {
	c := provider.Check{Repo: repo, HeadSHA: head, Name: "sluice/" + s.Release}
	// The check is the validator's verdict; approvals are the gate's, and
	// a check left in progress until then would hold a merge forever.
	switch {
	case s.Verdict == string(sluicev1.VerdictFail):
		c.Conclusion, c.Title = "failure", "denied by policy"
	case s.Approval.Needed > 0:
		c.Conclusion, c.Title = "success", fmt.Sprintf("%s, risk %s: %d more approval(s) needed at the gate", s.Verdict, s.Risk, s.Approval.Needed)
	default:
		c.Conclusion, c.Title = "success", fmt.Sprintf("%s, risk %s", s.Verdict, s.Risk)
	}
	bodies := review.Markdown([]*review.Section{s}, 65000, 1)
	c.Summary = strings.SplitN(bodies[0], "\n", 2)[1]
	return c
}

func (p *publisher) submit(h *Handler, key string, job commentJob) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pending == nil {
		p.pending, p.running, p.posted = map[string]commentJob{}, map[string]bool{}, map[string]commentJob{}
	}
	p.pending[key] = job
	if p.running[key] {
		return
	}
	p.running[key] = true
	p.wg.Add(1)
	go p.run(h, key)
}

// run posts the latest job of key until none is left, retrying a failed
// one after each of the handler's retry delays, then giving up (the next
// push or review renders it again).
func (p *publisher) run(h *Handler, key string) {
	defer p.wg.Done()
	retry := h.CommentRetry
	if retry == nil {
		retry = DefaultCommentRetry
	}
	attempt := 0
	for {
		p.mu.Lock()
		job, ok := p.pending[key]
		if !ok {
			delete(p.running, key)
			p.mu.Unlock()
			return
		}
		delete(p.pending, key)
		last, had := p.posted[key]
		p.mu.Unlock()
		if had && reflect.DeepEqual(last, job) {
			continue
		}

		err := h.post(job)
		if err == nil {
			attempt = 0
			p.mu.Lock()
			p.posted[key] = job
			p.mu.Unlock()
			continue
		}
		if attempt == len(retry) {
			h.Log.Error(err, "Giving up updating the pull request's review comment", "pullRequest", key, "attempts", attempt+1)
			attempt = 0
			continue
		}
		h.Log.Info("Updating the pull request's review comment failed; retrying", "pullRequest", key, "reason", err.Error(), "after", retry[attempt].String())
		time.Sleep(retry[attempt])
		attempt++
		p.mu.Lock()
		if _, newer := p.pending[key]; !newer {
			p.pending[key] = job
		}
		p.mu.Unlock()
	}
}

// post writes one job: the comments, then the Check Runs.
func (h *Handler) post(job commentJob) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := h.Comments.SyncComments(ctx, job.thread, job.bodies)
	if err != nil {
		return err
	}
	if res.Closed {
		return nil
	}
	for _, c := range job.checks {
		if err := h.Comments.SyncCheckRun(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// WaitComments waits until no comment update is pending (tests, and a
// graceful shutdown).
func (h *Handler) WaitComments() { h.pub.wg.Wait() }

// rememberInputs keeps what the review of cr is rendered from.
func (h *Handler) rememberInputs(cr *sluicev1.ChangeRequest, in review.Input) {
	h.inputs.Store(cr.Namespace+"/"+cr.Name, in)
}

// forgetInputs drops the review inputs of pull request n's previews.
func (h *Handler) forgetInputs(ns string, n int64) {
	suffix := "-pr" + strconv.FormatInt(n, 10) + "-"
	h.inputs.Range(func(k, _ any) bool {
		if key := k.(string); strings.HasPrefix(key, ns+"/") && strings.Contains(key, suffix) {
			h.inputs.Delete(k)
		}
		return true
	})
}

// storeReview keeps the redacted review section of cr beside it, for
// `kubectl sluice diff` and for rendering the comment again when its
// approvals change (changespec.StoreReview).
func (h *Handler) storeReview(ctx context.Context, cr *sluicev1.ChangeRequest, in review.Input) error {
	return changespec.StoreReview(ctx, h.Client, FieldOwner, cr, in)
}
