// Package preview turns pull requests into preview ChangeRequests and
// reviews into Approvals.
//
// A pull request opened, updated or reopened is fetched through its head
// ref (refs/pull/N/head, refs/merge-requests/N/head); every release whose
// inputs differ between the PR's base and its head gets a preview
// ChangeRequest named v1alpha1.PreviewChangeRequestName, built exactly as
// the syncer builds a change of the tracked branch (same artifact, same
// validator), so its approvalDigest equals the merge commit's whenever the
// release's content, manifests and plan are the same. Its verdict goes back
// to the pull request as a commit status per release. A closed pull request
// loses its previews; Approvals stay, since they are addressed by digest and
// may count for the merge commit.
//
// A review becomes one Approval per preview at the reviewed commit:
// approved → approve, changes requested → reject, dismissed → revoke; a
// commented review does nothing, and neither does a review the provider's
// API does not confirm (the reviewer cannot write to the repository, or the
// review is not the reviewer's latest state).
package preview

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/metrics"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/status"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// FieldOwner of the objects this package writes.
const FieldOwner = "gitops-syncer-preview"

// Remotes gives a Repository's git remote with its credentials (the
// syncer's RepositoryReconciler).
type Remotes interface {
	RemoteFor(ctx context.Context, repo *sluicev1.Repository) (git.Remote, error)
}

// StatusPoster posts commit statuses (status.Client).
type StatusPoster interface {
	Post(ctx context.Context, s status.Status) error
}

// ReviewConfirmer asks the provider's API whether a review counts
// (provider.API): it returns the review to record, or an error wrapping
// provider.ErrUnconfirmed.
type ReviewConfirmer interface {
	Confirm(ctx context.Context, ev *provider.Event) (*provider.Review, error)
}

// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=changerequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=approvals,verbs=get;list;create
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;create

// Handler builds previews and records reviews. It implements
// webhook.PullRequestHandler.
type Handler struct {
	Client client.Client
	// APIReader reads without the cache; defaults to Client.
	APIReader client.Reader
	Git       git.Client
	Remotes   Remotes
	Validator validation.Validator
	Store     *artifact.Store
	// ArtifactBaseURL prefixes artifact URLs, as for the syncer's changes.
	ArtifactBaseURL string
	// Statuses, if set, gets a commit status per preview.
	Statuses StatusPoster
	// Reviews confirms every review with the provider's API; without it
	// no review becomes an Approval.
	Reviews ReviewConfirmer
	// ScratchDir holds temporary folders; defaults to the OS temp dir.
	ScratchDir string
	// Metrics, if set, counts created previews with the syncer's changes.
	Metrics *metrics.Metrics
	Log     logr.Logger
	// Comments, if set, gets the pull request's review comment (and, on
	// GitHub, a Check Run per release) after every push, in the
	// background; CommentRetry are the waits before retrying a failed
	// update (DefaultCommentRetry when nil).
	Comments     Commenter
	CommentRetry []time.Duration
	// CheckRuns also reports each release as a Check Run (GitHub).
	CheckRuns bool
	// Charts adds what a release fetches (a chart from a chart repository,
	// allowed Kustomize remote bases) to a preview's content (the syncer's
	// RepositoryReconciler); without it such a preview is rejected as not
	// fetched.
	Charts ChartContent

	locks   sync.Map // "<ns>/<repo>#<pr>" → *sync.Mutex
	inputs  reviewInputs
	pub     publisher
	threads sync.Map // threadKey → commentThread
}

// ChartContent fetches what svc's environment env takes from elsewhere, as
// for a change: the chart from a chart repository (nothing for other
// charts), and the Kustomize remote bases remotes its overlay names that
// the Repository allows, at their pinned commits, and the charts of the
// helmCharts entries charts of the overlay. It returns the content
// with them (fsys and inputs with sources.RemoteChartDir and
// manifest.RemoteBasesDir) and the chart the change records. problem is
// what only a human can fix (refused credentials, no match, a commit that
// cannot be had…), a deny finding; err is worth a retry.
type ChartContent interface {
	WithFetched(ctx context.Context, repo *sluicev1.Repository, svc *manifest.Service, env string, fsys fs.FS, inputs []string, remotes []manifest.RemoteBase, charts []manifest.HelmChart) (
		content fs.FS, contentInputs []string, chart *sluicev1.ChartSource, helmCharts []sluicev1.ChartSource, problem string, err error)
}

// lock serialises the work on one pull request (a review may arrive while
// its previews are still being built).
func (h *Handler) lock(repo *sluicev1.Repository, pr int64) func() {
	key := fmt.Sprintf("%s/%s#%d", repo.Namespace, repo.Name, pr)
	m, _ := h.locks.LoadOrStore(key, &sync.Mutex{})
	mu := m.(*sync.Mutex)
	mu.Lock()
	return mu.Unlock
}

func (h *Handler) reader() client.Reader {
	if h.APIReader != nil {
		return h.APIReader
	}
	return h.Client
}

// PullRequest handles an opened, updated, reopened or closed pull request.
func (h *Handler) PullRequest(ctx context.Context, repo *sluicev1.Repository, ev *provider.Event) error {
	pr := ev.PullRequest
	if pr == nil {
		return errors.New("no pull request in the event")
	}
	unlock := h.lock(repo, pr.Number)
	defer unlock()
	switch pr.Action {
	case provider.PRClosed:
		if h.mergedKeepingHistory(ctx, repo, pr) {
			// The branch sync reads the pull request's author and pushers
			// from the previews for the merge commit's changes, then
			// deletes them (controller.mergedPullRequests).
			return nil
		}
		h.forgetInputs(repo.Namespace, pr.Number)
		h.threads.Delete(threadKey(repo.Namespace, repo.Name, pr.Number))
		return h.deletePreviews(ctx, repo, pr.Number)
	case provider.PROpened, provider.PRUpdated, provider.PRReopened:
		b, err := h.build(ctx, repo, ev, pr, pr.HeadSHA)
		if len(b) > 0 {
			h.publishReview(ctx, repo, ev, pr, b)
		}
		return err
	}
	return nil
}

// mergedKeepingHistory reports whether pr was merged into the tracked
// branch with its head commit in the merge's history (a merge commit or a
// fast-forward), so the branch sync will find its previews by ancestry.
// Squash and rebase merges rewrite the commits: their previews are deleted
// at once, and the merge commit's changes carry only commit e-mails.
func (h *Handler) mergedKeepingHistory(ctx context.Context, repo *sluicev1.Repository, pr *provider.PullRequest) bool {
	if !pr.Merged || pr.MergeCommitSHA == "" || pr.HeadSHA == "" || repo.GetRef().Branch == "" || pr.BaseRef != "refs/heads/"+repo.GetRef().Branch {
		return false
	}
	remote, err := h.Remotes.RemoteFor(ctx, repo)
	if err != nil {
		return false
	}
	cache, err := h.Git.Fetch(ctx, remote, pr.BaseRef, pr.MergeCommitSHA)
	if err != nil || !cache.HasCommit(pr.HeadSHA) {
		return false
	}
	ok, err := cache.IsAncestor(pr.HeadSHA, pr.MergeCommitSHA)
	return err == nil && ok
}

// previewsAllowed says whether the Repository wants previews of pr.
func previewsAllowed(repo *sluicev1.Repository, pr *provider.PullRequest) (bool, string) {
	switch repo.Spec.Previews {
	case sluicev1.PreviewsNone:
		return false, "previews are off"
	case sluicev1.PreviewsAll:
		return true, ""
	}
	if pr.Fork {
		return false, "the pull request comes from a fork and the Repository's previews are sameRepo"
	}
	return true, ""
}

// mergeBaser is the git layer's merge-base computation, where it has one.
type mergeBaser interface {
	MergeBase(a, b string) (string, error)
}

// built is one preview made (or found) for a release.
type built struct {
	cr      *sluicev1.ChangeRequest
	created bool
}

// build creates the previews of pr at head: one per release whose inputs
// differ between the base and head. It returns every preview at head.
func (h *Handler) build(ctx context.Context, repo *sluicev1.Repository, ev *provider.Event, pr *provider.PullRequest, head string) ([]built, error) {
	log := h.Log.WithValues("repository", repo.Namespace+"/"+repo.Name, "pullRequest", pr.Number, "head", sluicev1.ShortSHA(head))
	if ok, why := previewsAllowed(repo, pr); !ok {
		log.Info("No previews for this pull request", "reason", why)
		return nil, nil
	}
	remote, err := h.Remotes.RemoteFor(ctx, repo)
	if err != nil {
		return nil, fmt.Errorf("remote of %s: %w", repo.Name, err)
	}
	cache, err := h.Git.Fetch(ctx, remote, pr.HeadRef, head)
	if err != nil {
		return nil, fmt.Errorf("fetch %s: %w", pr.HeadRef, err)
	}
	// The base is the commit the payload names, or the base branch's tip
	// when the payload names none or one the remote no longer has.
	base := pr.BaseSHA
	if base == "" || !cache.HasCommit(base) {
		if cache, err = h.Git.Fetch(ctx, remote, pr.BaseRef, ""); err != nil {
			return nil, fmt.Errorf("fetch %s: %w", pr.BaseRef, err)
		}
		if base == "" || !cache.HasCommit(base) {
			if base, err = cache.ResolveRef(pr.BaseRef); err != nil {
				return nil, err
			}
		}
	}

	// Compare with the merge base where the git layer can compute it, so a
	// service changed on the base branch after the pull request branched
	// off gets no preview of the pull request's older copy of it.
	if mb, ok := any(cache).(mergeBaser); ok {
		if m, err := mb.MergeBase(head, base); err == nil && m != "" {
			base = m
		}
	}

	fsys, err := cache.FS(head)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", sluicev1.ShortSHA(head), err)
	}
	scratch, err := os.MkdirTemp(h.ScratchDir, "preview-")
	if err != nil {
		return nil, fmt.Errorf("create scratch folder: %w", err)
	}
	defer os.RemoveAll(scratch)
	servicesPath := repo.ServicesPath()
	entries, err := catalog.Discover(fsys, servicesPath, scratch)
	if errors.Is(err, catalog.ErrNoServicesPath) {
		log.Info("No services folder at the pull request head", "path", servicesPath)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("find services at %s: %w", sluicev1.ShortSHA(head), err)
	}
	commit, err := cache.Commit(head)
	if err != nil {
		return nil, err
	}
	baseFS, err := cache.FS(base)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", sluicev1.ShortSHA(base), err)
	}
	authors := []sluicev1.Identity{}
	if pr.Author != "" {
		authors = append(authors, sluicev1.Identity(pr.Author))
	}
	if emails, err := cache.Authors(head, base, 1000); err == nil {
		authors = append(authors, changespec.EmailIdentities(emails)...)
	}
	// Whoever pushed to the pull request so far: the pushers the earlier
	// previews recorded, and the sender of this pull-request event.
	people := prPeople{author: sluicev1.Identity(pr.Author)}
	if people.pushers, err = h.pushersOf(ctx, repo, pr.Number); err != nil {
		return nil, err
	}
	if ev != nil && ev.Kind == provider.KindPullRequest {
		people.pushers = changespec.AddIdentity(people.pushers, sluicev1.Identity(pr.Sender))
	}

	var out []built
	var errs []error
	for i := range entries {
		e := &entries[i]
		if e.Err != nil || e.Service == nil {
			// The syncer reports bad manifests on the branch; a preview
			// cannot be built from one.
			log.Info("Skipping a service whose manifest is invalid at the pull request head", "dir", e.Dir)
			h.postStatus(ctx, ev, head, status.StateFailure, "sluice/"+path.Base(e.Dir), "service.yaml is invalid at this commit")
			continue
		}
		for _, env := range e.Service.Environments {
			name := sluicev1.ReleaseName(e.Service.Name, sluicev1.EnvironmentName(env.Name))
			changed, err := releaseChanged(cache, baseFS, e, env.Name, head, base)
			if err != nil {
				return nil, err
			}
			if !changed {
				// The pull request changes nothing this release reads.
				continue
			}
			b, err := h.buildOne(ctx, repo, cache, pr, head, base, e, env, name, commit, authors, people)
			if err != nil {
				errs = append(errs, fmt.Errorf("release %s: %w", name, err))
				continue
			}
			out = append(out, b)
			if b.created {
				state, ctxName, desc := status.ForChangeRequest(b.cr)
				h.postStatus(ctx, ev, head, state, ctxName, desc)
			}
		}
	}
	return out, errors.Join(errs...)
}

// prPeople are a pull request's author and pushers.
type prPeople struct {
	author  sluicev1.Identity
	pushers []sluicev1.Identity
}

// pushersOf returns the pushers the previews of pull request n recorded,
// oldest preview first.
func (h *Handler) pushersOf(ctx context.Context, repo *sluicev1.Repository, n int64) ([]sluicev1.Identity, error) {
	var list sluicev1.ChangeRequestList
	if err := h.reader().List(ctx, &list, client.InNamespace(repo.Namespace), client.MatchingLabels{
		sluicev1.LabelRepository: repo.Name, sluicev1.LabelPreview: "true", sluicev1.LabelPullRequest: strconv.FormatInt(n, 10),
	}); err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool {
		return list.Items[i].CreationTimestamp.Before(&list.Items[j].CreationTimestamp)
	})
	var out []sluicev1.Identity
	for _, cr := range list.Items {
		for _, id := range cr.Spec.Pushers {
			out = changespec.AddIdentity(out, id)
		}
	}
	return out, nil
}

// releaseChanged reports whether the release of env differs between base
// and head in what it reads (catalog.ReleaseInputs): its view of
// service.yaml, its values files, chart and stack.
func releaseChanged(cache *git.Repo, baseFS fs.FS, e *catalog.Entry, env, head, base string) (bool, error) {
	in, ok := e.Releases[env]
	if !ok {
		return false, fmt.Errorf("no inputs listed for %s environment %q", e.Dir, env)
	}
	headTree, err := in.Tree(cache, head)
	if err != nil {
		return false, fmt.Errorf("hash inputs: %w", err)
	}
	view, ok := catalog.ViewAt(baseFS, e.Dir, env)
	if !ok {
		return true, nil // new at head, or unreadable at the base
	}
	baseTree, err := catalog.ReleaseInputs{Paths: in.Paths, View: view}.Tree(cache, base)
	if err != nil {
		return false, fmt.Errorf("hash inputs: %w", err)
	}
	return headTree != baseTree, nil
}

// buildOne creates the preview of one release, or returns the one that
// exists already.
func (h *Handler) buildOne(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, pr *provider.PullRequest, head, base string,
	e *catalog.Entry, env manifest.Environment, release string, commit git.CommitInfo, authors []sluicev1.Identity, people prPeople) (built, error) {
	name := sluicev1.PreviewChangeRequestName(release, pr.Number, head)
	existing := &sluicev1.ChangeRequest{}
	err := h.reader().Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: name}, existing)
	if err == nil {
		return built{cr: existing}, nil
	}
	if !apierrors.IsNotFound(err) {
		return built{}, fmt.Errorf("read preview %s: %w", name, err)
	}

	fsys, err := cache.FS(head)
	if err != nil {
		return built{}, err
	}
	var findings []sluicev1.Finding
	content, inputs := fs.FS(fsys), e.Inputs
	var chart *sluicev1.ChartSource
	var helmCharts []sluicev1.ChartSource
	if h.Charts != nil {
		rin := e.Releases[env.Name]
		c, in, ch, hc, problem, err := h.Charts.WithFetched(ctx, repo, e.Service, env.Name, fsys, e.Inputs, rin.RemoteBases, rin.HelmCharts)
		switch {
		case err != nil:
			return built{}, err
		case problem != "":
			findings = append(findings, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "chart", Message: git.Redact(problem)})
		default:
			content, inputs, chart, helmCharts = c, in, ch, hc
		}
	}
	art, err := artifact.Build(content, inputs)
	if err != nil {
		findings = append(findings, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "artifact", Message: git.Redact(err.Error())})
		if art, err = artifact.Build(fsys, []string{path.Join(e.Dir, manifest.FileName)}); err != nil {
			return built{}, fmt.Errorf("build artifact: %w", err)
		}
	}
	key := artifact.Key{Namespace: repo.Namespace, Repository: repo.Name, Revision: head, Release: release}
	if err := h.Store.Put(key, art.TarGz); err != nil {
		return built{}, fmt.Errorf("store artifact: %w", err)
	}
	var res *validation.Result
	if len(findings) == 0 {
		if res, err = h.validate(ctx, repo, cache, e, env.Name, release, art); err != nil {
			return built{}, err
		}
	}
	src, err := changespec.SourceOf(e.Service, env.Name)
	if err != nil {
		return built{}, err
	}
	if chart != nil {
		src.Chart = *chart
	}
	src.HelmCharts = helmCharts
	cr := changespec.Build(changespec.Change{
		Repository:        repo,
		Release:           release,
		Service:           e.Service.Name,
		Environment:       env.Name,
		ServiceDir:        e.Dir,
		Source:            src,
		Name:              name,
		Revision:          head,
		Attempt:           1,
		PreviousRevision:  base,
		Authors:           authors,
		PullRequestAuthor: people.author,
		Pushers:           people.pushers,
		CommitMessage:     commit.Message,
		PullRequest:       &sluicev1.PullRequestRef{Number: pr.Number, HeadSHA: head, Preview: true, Fork: pr.Fork},
		TargetNamespace:   env.Namespace,
		Delivery:          sluicev1.Delivery(env.Delivery),
		Rule:              changespec.RuleOf(env.Approval),
		Artifact:          art,
		ArtifactURL:       key.URL(h.ArtifactBaseURL),
		Result:            res,
		Findings:          findings,
		InputsErr:         e.InputsErr,
		Verification:      changespec.VerificationBlockOf(e.Service, env.Name),
		Files:             fsys,
	})
	// Owned by its Release when the Release exists and is this
	// Repository's, otherwise by the Repository (a new service).
	var owner client.Object = repo
	rel := &sluicev1.Release{}
	if err := h.reader().Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: release}, rel); err == nil && metav1.IsControlledBy(rel, repo) {
		owner = rel
	}
	stored, created, err := h.creator().Create(ctx, owner, cr)
	if err != nil {
		return built{}, err
	}
	if !created {
		return built{cr: stored}, nil
	}
	if res != nil {
		in := changespec.ReviewInput(res, appliedRevision(ctx, h.reader(), repo, release))
		h.rememberInputs(cr, in)
		if err := h.storeReview(ctx, cr, in); err != nil {
			// `kubectl sluice diff` then shows less; the preview stands.
			h.Log.Error(err, "Storing the review of a preview failed", "changeRequest", cr.Name)
		}
		if err := changespec.StorePlanError(ctx, h.Client, FieldOwner, cr, res); err != nil {
			// Approvers then miss the details; nothing of them is shown.
			h.Log.Error(err, "Storing the plan error of a preview failed", "changeRequest", cr.Name)
		}
	}
	h.Log.Info("Created preview ChangeRequest", "changeRequest", name, "verdict", cr.Spec.Verdict.Result, "approvalDigest", cr.Spec.ApprovalDigest)
	return built{cr: cr, created: true}, nil
}

// creator is the syncer's one path for storing a ChangeRequest, with the
// preview's field owner.
func (h *Handler) creator() changespec.Creator {
	c := changespec.Creator{Client: h.Client, Reader: h.reader(), FieldOwner: FieldOwner}
	if h.Metrics != nil {
		c.Created = h.Metrics.ChangeRequestsCreated
	}
	return c
}

// validate extracts the artifact and validates it, exactly as the syncer
// does for a change of the tracked branch, rating the risk against the
// release at its last applied revision.
func (h *Handler) validate(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, e *catalog.Entry, env, release string, art *artifact.Artifact) (*validation.Result, error) {
	req := validation.Request{Service: e.Service, Environment: env, ControlNamespace: repo.Namespace, Release: release, Confine: validation.ConfinementOf(repo)}
	return changespec.Validate(ctx, h.Validator, h.ScratchDir, "preview-validate-", art, req, func(dir string) (*validation.Previous, error) {
		// Rated like the branch's change will be: against the release's
		// last applied revision; nothing applied means every object is new.
		rel := &sluicev1.Release{}
		err := h.reader().Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: release}, rel)
		switch {
		case err == nil && metav1.IsControlledBy(rel, repo) && rel.Status.AppliedRevision != "":
			return previousAt(cache, rel.Status.AppliedRevision, e.Dir, e.Service.Name, env, dir), nil
		case err != nil && !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("read release %s: %w", release, err)
		}
		return nil, nil
	})
}

// deletePreviews deletes every preview ChangeRequest of pull request n.
func (h *Handler) deletePreviews(ctx context.Context, repo *sluicev1.Repository, n int64) error {
	var list sluicev1.ChangeRequestList
	if err := h.reader().List(ctx, &list, client.InNamespace(repo.Namespace), client.MatchingLabels{
		sluicev1.LabelRepository: repo.Name, sluicev1.LabelPreview: "true", sluicev1.LabelPullRequest: strconv.FormatInt(n, 10),
	}); err != nil {
		return fmt.Errorf("list previews: %w", err)
	}
	var errs []error
	for i := range list.Items {
		cr := &list.Items[i]
		if cr.Spec.PullRequest == nil || !cr.Spec.PullRequest.Preview {
			continue // never a real change, whatever its labels say
		}
		if err := h.Client.Delete(ctx, cr, client.Preconditions{UID: &cr.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete preview %s: %w", cr.Name, err))
		}
	}
	return errors.Join(errs...)
}

// postStatus posts a commit status when a poster is configured; a failure
// is logged, never fatal: the preview itself is what counts.
func (h *Handler) postStatus(ctx context.Context, ev *provider.Event, sha string, state status.State, context, desc string) {
	if h.Statuses == nil || ev == nil {
		return
	}
	err := h.Statuses.Post(ctx, status.Status{Repo: ev.Repo, ProjectID: ev.ProjectID, SHA: sha, Context: context, State: state, Description: desc})
	if err != nil {
		h.Log.Error(err, "Posting a commit status failed", "context", context)
	}
}

// appliedRevision is the release's last applied revision, which the
// preview's manifest is compared with ("" when none, or not this
// Repository's release).
func appliedRevision(ctx context.Context, r client.Reader, repo *sluicev1.Repository, release string) string {
	rel := &sluicev1.Release{}
	if err := r.Get(ctx, types.NamespacedName{Namespace: repo.Namespace, Name: release}, rel); err != nil || !metav1.IsControlledBy(rel, repo) {
		return ""
	}
	return rel.Status.AppliedRevision
}
