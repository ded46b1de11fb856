package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Revert pull requests (issue 23, "git is told").
//
// A rollback puts the cluster back on the verified change, while the
// tracked branch still holds the failed commit. Where a provider is
// configured (Forge) and the Repository's URL is on it, the syncer makes
// a commit reverting the failed change's commit on the branch head (the
// reverse of its diff against its first parent), pushes it to the branch
// sluice/revert-<failed change> with the provider's token, and opens a
// pull request from it. The rollback ChangeRequest links it
// (AnnotationRevertPullRequest). Idempotent: an existing pull request
// from that branch, in any state, is found and linked, never opened
// again. A revert that does not apply cleanly (a later commit changed a
// path of the failed one), a failed change's commit gone from the branch
// or a Repository URL that cannot be pushed to with a token is declined
// once (AnnotationRevertDeclined, an Event): a person reverts in git.

const (
	// eventRevertPullRequest: the revert pull request was opened or found.
	eventRevertPullRequest = "RevertPullRequest"
	// eventRevertDeclined: no revert pull request, and why.
	eventRevertDeclined = "RevertDeclined"
	// revertBranchPrefix starts the branch of a revert pull request.
	revertBranchPrefix = "sluice/revert-"
)

// branchPusher is the git client's push (GoGit.Push).
type branchPusher interface {
	Push(ctx context.Context, r git.Remote, sha, branch string) error
}

// revertPullRequest opens or finds the revert pull request of rb's
// failed change and links it from rb; see the comment above.
func (r *RepositoryReconciler) revertPullRequest(ctx context.Context, repo *sluicev1.Repository, rel *sluicev1.Release, rb *sluicev1.ChangeRequest) error {
	if r.Forge == nil || rb.Spec.Rollback == nil {
		return nil
	}
	if rb.Annotations[sluicev1.AnnotationRevertPullRequest] != "" || rb.Annotations[sluicev1.AnnotationRevertDeclined] != "" {
		return nil
	}
	full, ok := r.Forge.RepoOf(repo.Spec.URL)
	if !ok {
		log.FromContext(ctx).V(1).Info("No revert pull request: the repository is not on the configured provider", "repository", repo.Name, "provider", r.Forge.Provider)
		return nil
	}
	err := r.openRevert(ctx, repo, rel, rb, full)
	var d *declineError
	if errors.As(err, &d) {
		msg := fmt.Sprintf("no revert pull request of %s: %s; revert it in git", rb.Spec.Rollback.Of, git.Redact(d.msg))
		r.event(rel, corev1.EventTypeWarning, eventRevertDeclined, msg)
		log.FromContext(ctx).Info("Revert pull request declined", "release", rel.Name, "rollback", rb.Name, "why", d.msg)
		return r.annotateChange(ctx, rb, sluicev1.AnnotationRevertDeclined, text.Truncate(msg, 1024))
	}
	return err
}

// openRevert does the work of revertPullRequest for the repository full
// on the provider; a *declineError is for a person.
func (r *RepositoryReconciler) openRevert(ctx context.Context, repo *sluicev1.Repository, rel *sluicev1.Release, rb *sluicev1.ChangeRequest, full string) error {
	of := rb.Spec.Rollback.Of
	ref := repo.GetRef()
	if ref.Branch == "" || ref.Tag != "" {
		return decline("the Repository tracks no branch to revert on")
	}
	failed := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rb.Namespace, Name: of}, failed); err != nil {
		if apierrors.IsNotFound(err) {
			return decline("the failed change %s is gone", of)
		}
		return fmt.Errorf("read failed change %s: %w", of, err)
	}
	open := provider.PullRequestOpen{Repo: full, Head: revertBranchPrefix + of, Base: ref.Branch,
		Title: fmt.Sprintf("Revert %s: the verification of %s failed", sluicev1.ShortSHA(failed.Spec.Revision), failed.Name),
		Body: fmt.Sprintf("The verification of %s (release %s, commit %s) failed, and Sluice rolled the release back to the verified %s with %s.\n\n"+
			"This pull request reverts commit %s on %s, so git and the cluster agree again once it merges. "+
			"Its merge is a change like any other: Sluice plans, validates and gates it.\n\n<!-- sluice:revert %s -->\n",
			failed.Name, rel.Name, failed.Spec.Revision, rb.Spec.Rollback.To, rb.Name, failed.Spec.Revision, ref.Branch, of)}
	if pr, found, err := r.Forge.FindPullRequest(ctx, open); err != nil {
		return fmt.Errorf("find the revert pull request: %w", err)
	} else if found {
		return r.linkRevert(ctx, rel, rb, pr)
	}

	remote, err := r.RemoteFor(ctx, repo)
	if err != nil {
		return err
	}
	if u, err := url.Parse(repo.Spec.URL); err != nil || (u.Scheme != "https" && u.Scheme != "http") {
		return decline("a revert branch is pushed with the provider's token over HTTPS, and the Repository's URL is not an HTTP(S) one")
	}
	cache, err := r.Git.Fetch(ctx, remote, repo.TrackedRef(), "")
	if err != nil {
		return fmt.Errorf("fetch %s: %w", repo.TrackedRef(), err)
	}
	head, err := cache.ResolveRef(repo.TrackedRef())
	if err != nil {
		return fmt.Errorf("resolve %s: %w", repo.TrackedRef(), err)
	}
	rev := failed.Spec.Revision
	if ok, err := cache.IsAncestor(rev, head); err != nil {
		return err
	} else if !ok {
		return decline("commit %s of %s is not on %s any more", sluicev1.ShortSHA(rev), of, ref.Branch)
	}
	info, err := cache.Commit(rev)
	if err != nil {
		return err
	}
	subject, _, _ := strings.Cut(strings.TrimSpace(info.Message), "\n")
	msg := fmt.Sprintf("Revert %q\n\nThis reverts commit %s.\n\nThe verification of %s failed; Sluice rolled %s back to %s (%s).\n",
		subject, rev, of, rel.Name, rb.Spec.Rollback.To, rb.Name)
	sig := object.Signature{Name: "Sluice", Email: "sluice@sluice.invalid", When: time.Now().UTC().Truncate(time.Second)}
	sha, err := cache.Revert(rev, head, sig, msg)
	var conflict *git.ConflictError
	if errors.As(err, &conflict) {
		return decline("%s", conflict.Msg)
	}
	if err != nil {
		return fmt.Errorf("make the revert commit: %w", err)
	}
	p, ok := r.Git.(branchPusher)
	if !ok {
		return decline("this git client cannot push")
	}
	user, password, err := r.Forge.PushAuth(ctx)
	if err != nil {
		return err
	}
	push := remote
	push.Auth = &git.Auth{Username: user, Password: password}
	if err := p.Push(ctx, push, sha, open.Head); err != nil {
		return fmt.Errorf("push the revert branch %s: %w", open.Head, err)
	}
	pr, err := r.Forge.OpenPullRequest(ctx, open)
	if err != nil {
		return fmt.Errorf("open the revert pull request: %w", err)
	}
	return r.linkRevert(ctx, rel, rb, pr)
}

// linkRevert records the revert pull request on the rollback
// ChangeRequest, with an Event on the Release.
func (r *RepositoryReconciler) linkRevert(ctx context.Context, rel *sluicev1.Release, rb *sluicev1.ChangeRequest, pr provider.OpenedPullRequest) error {
	verb := "opened"
	if pr.Existing {
		verb = "found"
	}
	r.event(rel, corev1.EventTypeNormal, eventRevertPullRequest, fmt.Sprintf("revert pull request %d of %s %s: %s", pr.Number, rb.Spec.Rollback.Of, verb, pr.URL))
	log.FromContext(ctx).Info("Revert pull request linked", "release", rel.Name, "rollback", rb.Name, "number", pr.Number, "url", pr.URL, "existing", pr.Existing)
	return r.annotateChange(ctx, rb, sluicev1.AnnotationRevertPullRequest, pr.URL)
}

// annotateChange sets one annotation of a ChangeRequest (its metadata:
// the spec is immutable).
func (r *RepositoryReconciler) annotateChange(ctx context.Context, cr *sluicev1.ChangeRequest, key, value string) error {
	if cr.Annotations[key] == value {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{key: value}}})
	if err != nil {
		return err
	}
	if err := r.Patch(ctx, cr, client.RawPatch("application/merge-patch+json", patch), client.FieldOwner(ControllerName)); err != nil {
		return fmt.Errorf("annotate %s: %w", cr.Name, err)
	}
	return nil
}
