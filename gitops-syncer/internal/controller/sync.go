package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/kit/text"
	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// RemoteFor reads the Repository's credentials Secret and returns its git
// remote. Errors are safe to show.
func (r *RepositoryReconciler) RemoteFor(ctx context.Context, repo *sluicev1.Repository) (git.Remote, error) {
	remote := git.Remote{Key: repo.Namespace + "/" + repo.Name, URL: repo.Spec.URL, Timeout: repo.GetTimeout()}
	if repo.Spec.SecretRef == nil {
		return remote, nil
	}
	secret := &corev1.Secret{}
	key := types.NamespacedName{Namespace: repo.Namespace, Name: repo.Spec.SecretRef.Name}
	if err := r.APIReader.Get(ctx, key, secret); err != nil {
		if apierrors.IsNotFound(err) {
			return remote, &git.Error{Reason: git.ReasonSecret, Message: fmt.Sprintf("secret %q not found", key.Name)}
		}
		return remote, fmt.Errorf("read secret %q: %w", key.Name, err)
	}
	auth, err := git.AuthFromSecret(secret.Data)
	if err != nil {
		return remote, &git.Error{Reason: git.ReasonSecret, Message: fmt.Sprintf("secret %q: %s", key.Name, err.Error())}
	}
	remote.Auth = auth
	return remote, nil
}

// gitFailure concludes the pass from a git error: problems only a human
// can fix stall the Repository (no backoff loop, the poll retries); others
// are retried at the poll interval. Only an error that is not git's (an API
// read failed) fails the pass, for a retry with backoff.
func gitFailure(s *repoScope, err error) reconcile.Result {
	reason, stalled := sluicev1.ReasonGitOperationFailed, false
	switch git.ReasonOf(err) {
	case git.ReasonAuth:
		reason = sluicev1.ReasonAuthenticationFailed
	case git.ReasonHostKey:
		reason = sluicev1.ReasonHostKeyMismatch
	case git.ReasonRefNotFound:
		reason = sluicev1.ReasonRefNotFound
	case git.ReasonURL:
		reason, stalled = sluicev1.ReasonURLNotAllowed, true
	case git.ReasonSecret:
		reason, stalled = sluicev1.ReasonSecretNotFound, true
	case "":
		// Not a git error (an API read failed): back off.
		s.conclude(retrying(reason, git.Redact(err.Error())))
		return reconcile.Failure(err)
	}
	if stalled {
		s.conclude(stalledBy(reason, err.Error()))
	} else {
		s.conclude(retrying(reason, err.Error()))
	}
	return reconcile.Next()
}

// reconcileSync checks the remote head and, when anything needs doing,
// runs a sync pass over the commit. It goes on to the poll unless the pass
// failed (retried with backoff).
func (r *RepositoryReconciler) reconcileSync(ctx context.Context, s *repoScope) reconcile.Result {
	repo := s.repo
	key := client.ObjectKeyFromObject(repo)
	remote, err := r.RemoteFor(ctx, repo)
	if err != nil {
		return gitFailure(s, err)
	}
	ref := repo.TrackedRef()
	head, err := r.Git.Head(ctx, remote, ref)
	if err != nil {
		return gitFailure(s, err)
	}

	var owned sluicev1.ReleaseList
	if err := r.List(ctx, &owned, client.InNamespace(repo.Namespace), client.MatchingLabels{sluicev1.LabelRepository: repo.Name}); err != nil {
		return reconcile.Failure(fmt.Errorf("list releases: %w", err))
	}
	requested := repo.Annotations[sluicev1.AnnotationReconcileRequestedAt]
	if r.idle(key, repo, head, owned.Items) && requested == repo.Status.LastHandledReconcileAt {
		if !meta.IsStatusConditionTrue(repo.Status.Conditions, sluicev1.ConditionReady) {
			s.conclude(ready(sluicev1.ReasonSucceeded, "up to date at "+sluicev1.ShortSHA(head)))
		}
		return reconcile.Next()
	}

	// A sync with work to do is one span, continuing the trace of the
	// webhook delivery that asked for it; its ChangeRequests carry it on.
	ctx, span := tracer.Start(tracing.Extract(ctx, r.Trigger.Take(key)), "sluice.sync", trace.WithAttributes(
		attribute.String("sluice.repository", key.String()), attribute.String("vcs.ref.head.revision", head)))
	defer span.End()
	// What the pass reads from the API server is read fresh while git
	// fetches and the releases are validated (pendingReads).
	pending := r.startReads(ctx, repo)
	cache, err := r.Git.Fetch(ctx, remote, ref, head)
	if err != nil {
		_, _ = pending.get() // none outlives its pass
		span.SetStatus(codes.Error, "fetch failed")
		return gitFailure(s, err)
	}
	repo.Status.LastFetchedCommit = head
	pass := &syncPass{repoScope: s, r: r, cache: cache, head: head, owned: owned.Items, reads: pending}
	err = pass.run(ctx)
	// Every path waits for the reads: none outlives its pass.
	reads, rerr := pending.get()
	if err == nil {
		err = rerr
	}
	if err != nil {
		span.SetStatus(codes.Error, "sync failed")
		return reconcile.Failure(err)
	}
	res := pass.finish()
	if res.Is(reconcile.KindFailure) {
		span.SetStatus(codes.Error, "some releases failed")
	} else if derr := r.deleteMergedPreviews(ctx, reads.previews, cache, head); derr != nil {
		// Their people are recorded; a leftover preview is only clutter,
		// deleted at the next pass.
		log.FromContext(ctx).Error(derr, "Deleting previews of merged pull requests failed")
	}
	span.SetAttributes(attribute.Int("sluice.changerequests.created", len(pass.created)))
	return res
}

var tracer = tracing.Tracer("gitops-syncer")

// idle reports whether nothing changed since the last full pass: same head,
// every release it produced still there at the same inputs, and no re-plan
// asked for.
func (r *RepositoryReconciler) idle(key types.NamespacedName, repo *sluicev1.Repository, head string, owned []sluicev1.Release) bool {
	if head != repo.Status.LastSyncedCommit || repo.Generation != repo.Status.ObservedGeneration {
		return false
	}
	m, ok := r.memoFor(key)
	if !ok || m.commit != head || m.remote {
		return false
	}
	byName := map[string]*sluicev1.Release{}
	for i := range owned {
		byName[owned[i].Name] = &owned[i]
	}
	for name, tree := range m.trees {
		rel, ok := byName[name]
		if !ok || rel.Status.LastSyncedTree != tree || replanRequested(rel) != "" {
			return false
		}
	}
	return true
}

// syncPass is one pass over one commit of one Repository.
type syncPass struct {
	*repoScope
	r     *RepositoryReconciler
	cache *git.Repo
	head  string
	owned []sluicev1.Release

	// trees records the input hash of every release synced at head.
	trees map[string]string
	// retry lists failures worth retrying with backoff.
	retry []string
	// problems are failures only a human can fix, by condition reason.
	problems map[string][]string
	// notes are facts for the Ready message (rewritten history).
	notes   []string
	created []string

	// mu guards trees and createdBy while releases sync side by side.
	mu        sync.Mutex
	createdBy map[string][]string
	// reads are what the pass reads from the API server, started beside
	// the fetch (pendingReads).
	reads *pendingReads
	// remote says a release's chart comes from a chart repository.
	remote bool
}

func (p *syncPass) problem(reason, msg string) {
	if p.problems == nil {
		p.problems = map[string][]string{}
	}
	p.problems[reason] = append(p.problems[reason], msg)
}

// run processes every release of the commit; one failing release never
// stops the others.
func (p *syncPass) run(ctx context.Context) error {
	logger := log.FromContext(ctx)
	p.trees = map[string]string{}
	if last := p.repo.Status.LastSyncedCommit; last != "" && last != p.head {
		ok, err := p.cache.IsAncestor(last, p.head)
		if err != nil {
			return fmt.Errorf("check history: %w", err)
		}
		if !ok {
			msg := fmt.Sprintf("history rewritten: %s does not descend from the last synced commit %s; changes are computed by comparing trees, nothing is rolled back", sluicev1.ShortSHA(p.head), sluicev1.ShortSHA(last))
			p.notes = append(p.notes, msg)
			p.r.event(p.repo, corev1.EventTypeWarning, sluicev1.ReasonHistoryRewritten, msg)
			logger.Info("History rewritten", "head", p.head, "lastSynced", last)
		}
	}

	servicesPath := p.repo.ServicesPath()
	_, entries, err := p.r.servicesAt(p.cache, p.repo, p.head, "catalog-")
	if errors.Is(err, catalog.ErrNoServicesPath) {
		// Never prune on a missing folder: it is far likelier a mistake.
		p.problem(sluicev1.ReasonInvalidSpec, fmt.Sprintf("services folder %q not found at %s", servicesPath, sluicev1.ShortSHA(p.head)))
		return nil
	}
	if err != nil {
		return fmt.Errorf("find services: %w", err)
	}

	ownedByName := map[string]*sluicev1.Release{}
	for i := range p.owned {
		ownedByName[p.owned[i].Name] = &p.owned[i]
	}
	wanted := map[string]bool{}
	var jobs releaseJobs
	for i := range entries {
		e := &entries[i]
		if e.Err != nil {
			// Releases already known for this folder get a rejected
			// ChangeRequest; otherwise only the condition can say it.
			known := false
			for _, rel := range p.owned {
				if string(rel.Spec.SourcePath) == e.Dir {
					known = true
					wanted[rel.Name] = true
					rel := rel.DeepCopy()
					jobs.add(rel.Name, func(ctx context.Context) error { return p.syncInvalid(ctx, e, rel) })
				}
			}
			if !known {
				p.problem(sluicev1.ReasonManifestInvalid, git.Redact(e.Err.Error()))
			}
			continue
		}
		for _, env := range e.Service.Environments {
			name := sluicev1.ReleaseName(e.Service.Name, sluicev1.EnvironmentName(env.Name))
			wanted[name] = true
			existing := ownedByName[name]
			jobs.add(name, func(ctx context.Context) error { return p.syncRelease(ctx, e, env.Name, existing) })
		}
	}
	jobs.run(ctx, releaseWorkers)
	// What the releases concluded, in the order of the serial loop.
	for _, j := range jobs.list {
		for _, err := range j.errs {
			p.fail(ctx, j.name, err)
		}
		p.created = append(p.created, p.createdBy[j.name]...)
	}
	return p.prune(ctx, wanted)
}

// releaseWorkers bounds the releases one pass syncs at a time. Releases
// are independent (their own Release, ChangeRequests, artifact and
// validation), so a push changing several waits for the slowest, not for
// their sum.
const releaseWorkers = 4

// releaseJob is the sync of one release name in a pass: one step, or
// several, one after the other, when more than one folder claims the name.
type releaseJob struct {
	name  string
	steps []func(context.Context) error
	errs  []error
}

// releaseJobs are a pass's release syncs in the order of the serial loop.
type releaseJobs struct {
	list   []*releaseJob
	byName map[string]*releaseJob
}

func (js *releaseJobs) add(name string, step func(context.Context) error) {
	if js.byName == nil {
		js.byName = map[string]*releaseJob{}
	}
	j, ok := js.byName[name]
	if !ok {
		j = &releaseJob{name: name}
		js.byName[name] = j
		js.list = append(js.list, j)
	}
	j.steps = append(j.steps, step)
}

// run runs the jobs, at most workers at a time, each job's steps in order,
// and returns when all are done; every step's error is kept on its job.
func (js *releaseJobs) run(ctx context.Context, workers int) {
	sem := make(chan struct{}, max(workers, 1))
	var wg sync.WaitGroup
	for _, j := range js.list {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			for _, step := range j.steps {
				if err := step(ctx); err != nil {
					j.errs = append(j.errs, err)
				}
			}
		}()
	}
	wg.Wait()
}

// synced records that release name holds tree at the pass's head.
func (p *syncPass) synced(name, tree string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.trees[name] = tree
}

// createdFor records a ChangeRequest created for release name.
func (p *syncPass) createdFor(name, cr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.createdBy == nil {
		p.createdBy = map[string][]string{}
	}
	p.createdBy[name] = append(p.createdBy[name], cr)
}

// fail records a release's failure: conflicts and bad manifests are for a
// human, anything else is retried.
func (p *syncPass) fail(ctx context.Context, release string, err error) {
	var c *conflictError
	if errors.As(err, &c) {
		p.problem(sluicev1.ReasonOwnershipConflict, c.Error())
		return
	}
	log.FromContext(ctx).Error(err, "Syncing a release failed", "release", release)
	p.retry = append(p.retry, fmt.Sprintf("%s: %s", release, git.Redact(err.Error())))
}

// prune proposes a Delete change (spec.prune) for, or marks Orphaned and
// reports, the owned Releases whose service or environment left the
// repository (see pruneOne); it never deletes a Release itself.
func (p *syncPass) prune(ctx context.Context, wanted map[string]bool) error {
	var gone []string
	for i := range p.owned {
		rel := &p.owned[i]
		if !metav1.IsControlledBy(rel, p.repo) || !rel.DeletionTimestamp.IsZero() {
			continue
		}
		if p.pruneOne(ctx, rel, wanted[rel.Name]) {
			gone = append(gone, rel.Name)
		}
	}
	if len(gone) > 0 {
		sort.Strings(gone)
		p.problem(sluicev1.ReasonServiceRemoved, fmt.Sprintf("services left the repository; Releases %s are kept because prune is off", strings.Join(gone, ", ")))
	}
	return nil
}

// finish records the commit as synced when every release is done, and
// concludes the pass: a Failure when some release is to be retried.
func (p *syncPass) finish() reconcile.Result {
	repo := p.repo
	if len(p.retry) > 0 {
		msg := "some releases failed and are retried: " + strings.Join(p.retry, "; ")
		p.conclude(retrying(sluicev1.ReasonGitOperationFailed, text.Truncate(msg, 1024)))
		return reconcile.Failure(fmt.Errorf("sync %s: %d release(s) failed", sluicev1.ShortSHA(p.head), len(p.retry)))
	}
	// Everything that can be done at this commit is done.
	repo.Status.LastSyncedCommit = p.head
	p.r.remember(client.ObjectKeyFromObject(repo), syncMemo{commit: p.head, trees: p.trees, remote: p.remote})
	if len(p.problems) > 0 {
		reasons := make([]string, 0, len(p.problems))
		for reason := range p.problems {
			reasons = append(reasons, reason)
		}
		sort.Strings(reasons)
		var parts []string
		for _, reason := range reasons {
			parts = append(parts, strings.Join(p.problems[reason], "; "))
		}
		parts = append(parts, p.notes...)
		msg := fmt.Sprintf("synced %s with problems: %s", sluicev1.ShortSHA(p.head), strings.Join(parts, "; "))
		msg = text.Truncate(msg, 2048)
		if len(reasons) == 1 && reasons[0] == sluicev1.ReasonServiceRemoved {
			// ServiceRemoved alone is information, not a failure.
			p.conclude(ready(reasons[0], msg))
		} else {
			// Bad manifests and conflicts wait for a new commit: a human's.
			p.conclude(stalledBy(reasons[0], msg))
		}
		return reconcile.Next()
	}
	msg := fmt.Sprintf("synced %s", sluicev1.ShortSHA(p.head))
	if len(p.created) > 0 {
		msg += fmt.Sprintf("; created ChangeRequests %s", strings.Join(p.created, ", "))
	}
	reason := sluicev1.ReasonSucceeded
	if len(p.notes) > 0 {
		reason = sluicev1.ReasonHistoryRewritten
		msg += "; " + strings.Join(p.notes, "; ")
	}
	p.conclude(ready(reason, text.Truncate(msg, 2048)))
	return reconcile.Next()
}

// repoScope is one reconcile of one Repository. Its steps record what
// they conclude (conclude); summarize writes it, once, at the end of the
// pass, as the operator's reconcilers do.
type repoScope struct {
	repo *sluicev1.Repository
	// ready is what the pass concluded; nil leaves the conditions as
	// they are.
	ready *readiness
}

// readiness is what a pass concluded about its Repository: the Ready
// condition and the kstatus condition that goes with it.
type readiness struct {
	kind            readyKind
	reason, message string
}

type readyKind int

const (
	// kindReady: Ready=True; neither Reconciling nor Stalled.
	kindReady readyKind = iota + 1
	// kindRetrying: Ready=False and Reconciling=True: the failure is
	// retried (with backoff or at the next poll).
	kindRetrying
	// kindStalled: Ready=False and Stalled=True: only a human can fix it.
	kindStalled
	// kindSuspended: Ready=False; neither Reconciling nor Stalled.
	kindSuspended
)

func ready(reason, msg string) readiness    { return readiness{kindReady, reason, msg} }
func retrying(reason, msg string) readiness { return readiness{kindRetrying, reason, msg} }
func stalledBy(reason, msg string) readiness {
	return readiness{kindStalled, reason, msg}
}

func suspended() readiness {
	return readiness{kindSuspended, sluicev1.ReasonSuspended, "polling and syncing are suspended"}
}

// conclude records what the pass concluded; the last word wins.
func (s *repoScope) conclude(r readiness) { s.ready = &r }

// summarize writes what the pass concluded into the status, once, at its
// end: the Ready condition with Reconciling or Stalled (nothing else
// writes them), and observedGeneration only after a pass without error
// (ok), so a user can tell a processed generation from a failed one. A
// failed pass still says why in Ready.
func (s *repoScope) summarize(ok bool) {
	repo := s.repo
	if ok {
		repo.Status.ObservedGeneration = repo.Generation
	}
	if s.ready == nil {
		return
	}
	set := func(t string, status metav1.ConditionStatus, reason, msg string) {
		meta.SetStatusCondition(&repo.Status.Conditions, metav1.Condition{Type: t, Status: status, Reason: reason, Message: msg, ObservedGeneration: repo.Generation})
	}
	r := s.ready
	status := metav1.ConditionFalse
	if r.kind == kindReady {
		status = metav1.ConditionTrue
	}
	set(sluicev1.ConditionReady, status, r.reason, r.message)
	switch r.kind {
	case kindStalled:
		set(sluicev1.ConditionStalled, metav1.ConditionTrue, r.reason, r.message)
		meta.RemoveStatusCondition(&repo.Status.Conditions, sluicev1.ConditionReconciling)
	case kindRetrying:
		set(sluicev1.ConditionReconciling, metav1.ConditionTrue, sluicev1.ReasonProgressing, "retrying: "+r.message)
		meta.RemoveStatusCondition(&repo.Status.Conditions, sluicev1.ConditionStalled)
	default:
		meta.RemoveStatusCondition(&repo.Status.Conditions, sluicev1.ConditionReconciling)
		meta.RemoveStatusCondition(&repo.Status.Conditions, sluicev1.ConditionStalled)
	}
}

// servicesAt lists the services of repo at commit rev (catalog.Discover)
// and returns the commit's tree with them, to build artifacts from. The
// scratch skeleton Discover needs lives in a folder named prefix… under
// ScratchDir only while it runs: the entries do not refer to it. The
// entries of the last tree of each Repository and purpose (prefix) are
// kept under the digest of what Discover reads (catalog.Cache): a commit
// changing only values or templates does not write the skeleton again.
func (r *RepositoryReconciler) servicesAt(cache *git.Repo, repo *sluicev1.Repository, rev, prefix string) (fs.FS, []catalog.Entry, error) {
	fsys, err := cache.FS(rev)
	if err != nil {
		return nil, nil, fmt.Errorf("read commit %s: %w", sluicev1.ShortSHA(rev), err)
	}
	entries, err := r.catalog.Discover(catalogOwner(repo, prefix), fsys, repo.ServicesPath(), r.ScratchDir, prefix)
	return fsys, entries, err
}

// catalogOwner names repo's slot for one purpose in the catalog cache.
func catalogOwner(repo *sluicev1.Repository, prefix string) string {
	return repo.Namespace + "/" + repo.Name + "/" + prefix
}
