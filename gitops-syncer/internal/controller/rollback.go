package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// Rollbacks (the syncer's side).
//
// The operator asks for a rollback of a failed change with the Release
// annotation RollbackAnnotation(failed) = the verified change, written only
// after its status recorded the same decision. The syncer answers with a
// ChangeRequest built exactly like a push (planChange): the verified
// change's revision fetched from git, its artifact stored, validated (for
// Terraform a fresh plan from what is applied back to that
// configuration), with spec.rollback {of, to} (digested) and an info
// finding. Its name is RollbackChangeRequestName, so a restart creates
// nothing twice. It declines, with an Event and RolledBack=False
// RollbackDeclined on the Release, when the verified change or its
// revision is gone, the artifact rebuilt from git is not the verified
// one, or the fresh Terraform plan destroys or replaces something: a
// person decides then. A declined request is not tried again.

const (
	// eventRollbackProposed: a rollback ChangeRequest was created.
	eventRollbackProposed = "RollbackProposed"
)

// declineError says why a rollback cannot be built; it is for a person,
// never retried.
type declineError struct{ msg string }

func (e *declineError) Error() string { return e.msg }

func decline(format string, args ...any) error {
	return &declineError{msg: fmt.Sprintf(format, args...)}
}

// reconcileRollbacks answers the rollback requests on the Repository's
// Releases (rollbackRelease). One release's failure does not stop the
// others; failures are retried with backoff.
func (r *RepositoryReconciler) reconcileRollbacks(ctx context.Context, s *repoScope) reconcile.Result {
	var owned sluicev1.ReleaseList
	if err := r.List(ctx, &owned, client.InNamespace(s.repo.Namespace), client.MatchingLabels{sluicev1.LabelRepository: s.repo.Name}); err != nil {
		return reconcile.Failure(fmt.Errorf("list releases: %w", err))
	}
	var errs []error
	for i := range owned.Items {
		rel := &owned.Items[i]
		if !metav1.IsControlledBy(rel, s.repo) || !rel.DeletionTimestamp.IsZero() {
			continue
		}
		reqs := sluicev1.RollbackRequests(rel.Annotations)
		ofs := make([]string, 0, len(reqs))
		for of := range reqs {
			ofs = append(ofs, of)
		}
		sort.Strings(ofs)
		for _, of := range ofs {
			if err := r.rollbackRelease(ctx, s.repo, rel, of, reqs[of]); err != nil {
				errs = append(errs, fmt.Errorf("rollback of %s: %w", of, err))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return reconcile.Failure(err)
	}
	return reconcile.Next()
}

// rollbackRelease answers one request: nothing when the operator's status
// does not hold it (a request from anyone else is ignored), when it was
// declined, or when its ChangeRequest exists in full; otherwise it builds
// the rollback, or declines it. A rollback ChangeRequest, new or found,
// then gets its revert pull request (revertPullRequest).
func (r *RepositoryReconciler) rollbackRelease(ctx context.Context, repo *sluicev1.Repository, rel *sluicev1.Release, of, to string) error {
	if d := rel.Status.Rollback; d == nil || d.Of != of || d.To != to || !d.Requested {
		log.FromContext(ctx).V(1).Info("Ignoring a rollback annotation the operator's status does not hold", "release", rel.Name, "of", of)
		return nil
	}
	if declinedAlready(rel, of) {
		return nil
	}
	var list sluicev1.ChangeRequestList
	if err := r.List(ctx, &list, client.InNamespace(rel.Namespace), client.MatchingLabels{sluicev1.LabelRelease: rel.Name}); err != nil {
		return fmt.Errorf("list change requests: %w", err)
	}
	for i := range list.Items {
		if rb := list.Items[i].Spec.Rollback; rb != nil && rb.Of == of {
			ok, err := r.planSecretsComplete(ctx, &list.Items[i])
			if err != nil {
				return err
			}
			if ok {
				return r.revertPullRequest(ctx, repo, rel, &list.Items[i])
			}
		}
	}
	name, err := r.buildRollback(ctx, repo, rel, of, to)
	var d *declineError
	if errors.As(err, &d) {
		return r.declineRollback(ctx, rel, of, to, d.msg)
	}
	if err != nil || name == "" {
		return err
	}
	rb := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: name}, rb); err != nil {
		return fmt.Errorf("read rollback %s: %w", name, err)
	}
	return r.revertPullRequest(ctx, repo, rel, rb)
}

// buildRollback rebuilds the verified change to at its revision through
// planChange, as the rollback of of. It returns the created ChangeRequest's
// name ("" when an earlier pass created it).
func (r *RepositoryReconciler) buildRollback(ctx context.Context, repo *sluicev1.Repository, rel *sluicev1.Release, of, to string) (string, error) {
	target := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: to}, target); err != nil {
		if apierrors.IsNotFound(err) {
			return "", decline("the verified change %s is gone, so its artifact and digests cannot be checked", to)
		}
		return "", fmt.Errorf("read verified change %s: %w", to, err)
	}
	src := target.Spec.Source
	switch {
	case target.Spec.Release != rel.Name:
		return "", decline("%s is a change of release %s, not %s", to, target.Spec.Release, rel.Name)
	case target.Status.Phase != sluicev1.PhaseVerified:
		return "", decline("%s is %s, not Verified", to, target.Status.Phase)
	case src == nil || target.IsDelete():
		return "", decline("%s records no source to rebuild", to)
	}
	remote, err := r.RemoteFor(ctx, repo)
	if err != nil {
		return "", err
	}
	rev := target.Spec.Revision
	cache, err := r.Git.Fetch(ctx, remote, repo.TrackedRef(), rev)
	if git.ReasonOf(err) == git.ReasonRefNotFound {
		return "", decline("the revision %s of %s is gone from the repository: %s", sluicev1.ShortSHA(rev), to, git.Redact(err.Error()))
	}
	if err != nil {
		return "", err
	}
	_, entries, err := r.servicesAt(cache, repo, rev, "rollback-")
	if err != nil {
		return "", fmt.Errorf("find services at %s: %w", sluicev1.ShortSHA(rev), err)
	}
	for i := range entries {
		e := &entries[i]
		if e.Service == nil || e.Service.Name != src.Service {
			continue
		}
		env, ok := e.Service.Environment(string(src.Environment))
		if !ok || sluicev1.ReleaseName(e.Service.Name, sluicev1.EnvironmentName(env.Name)) != rel.Name {
			continue
		}
		want, source, err := desiredRelease(repo, e.Service, env.Name)
		if err != nil {
			return "", decline("the manifest at %s: %s", sluicev1.ShortSHA(rev), err)
		}
		in, ok := e.Releases[env.Name]
		if !ok {
			return "", decline("no inputs listed for environment %q at %s", env.Name, sluicev1.ShortSHA(rev))
		}
		tree, err := in.Tree(cache, rev)
		if err != nil {
			return "", fmt.Errorf("hash inputs: %w", err)
		}
		plan := &changePlan{release: rel, revision: rev, inputs: e.Inputs, tree: tree, service: e.Service, env: env.Name, inputsErr: e.InputsErr,
			spec: &want.Spec, source: source, rollback: &sluicev1.RollbackSpec{Of: of, To: to}, target: target}
		if err := r.fetchForRollback(ctx, repo, plan, in, src); err != nil {
			return "", err
		}
		return r.planChange(ctx, repo, cache, plan)
	}
	return "", decline("release %s is not in the manifest at %s", rel.Name, sluicev1.ShortSHA(rev))
}

// fetchForRollback gives the rollback's plan what the verified change
// took from elsewhere, as a change at that revision did: the chart from a
// chart repository and the charts of the overlay's helmCharts entries by
// the digests the verified change recorded (never a range resolved anew),
// and the overlay's remote bases at their pinned commits. What cannot be
// had any more declines the rollback; a failure worth retrying is
// returned.
func (r *RepositoryReconciler) fetchForRollback(ctx context.Context, repo *sluicev1.Repository, plan *changePlan, in catalog.ReleaseInputs, verified *sluicev1.ChangeSource) error {
	fail := func(err error) error {
		var ce *chartError
		if errors.As(err, &ce) {
			return decline("what the verified change %s fetched cannot be had again: %s", plan.target.Name, ce.msg)
		}
		return err
	}
	if c := verified.Chart; c.Repo != "" && c.Digest != "" {
		ch, err := r.chartByDigest(ctx, repo, c)
		if err != nil {
			return fail(err)
		}
		plan.chart = ch
		chartSource(plan.source, ch)
	}
	if len(in.RemoteBases) > 0 {
		bases, err := r.remoteBases(ctx, repo, in.RemoteBases)
		if err != nil {
			return fail(err)
		}
		plan.bases = bases
	}
	if len(in.HelmCharts) > 0 {
		kcharts, err := r.kustomizeChartsByDigest(ctx, repo, in.HelmCharts, verified.HelmCharts)
		if err != nil {
			return fail(err)
		}
		plan.kcharts = kcharts
		recordKustomizeCharts(plan.source, kcharts)
	}
	return nil
}

// checkRollbackContent declines a rollback whose artifact, rebuilt from
// git, is not exactly the verified change's content.
func (run *planRun) checkRollbackContent() error {
	plan := run.plan
	if plan.rollback == nil {
		return nil
	}
	if got, want := sluicev1.Digest(run.art.ContentDigest), plan.target.Spec.ContentDigest; got != want {
		return decline("the artifact rebuilt from revision %s is not the verified one of %s (content %s, verified %s)", sluicev1.ShortSHA(plan.revision), plan.target.Name, got, want)
	}
	return nil
}

// checkRollbackPlan declines a rollback whose fresh Terraform plan
// destroys or replaces something, or could not be made.
func checkRollbackPlan(plan *changePlan, res *validation.Result) error {
	if plan.rollback == nil {
		return nil
	}
	if res == nil {
		return decline("the rollback to %s could not be validated", plan.target.Name)
	}
	if ps := res.PlanSummary; ps != nil && (ps.Destroy > 0 || ps.Replace > 0) {
		return decline("the fresh Terraform plan back to %s destroys %d and replaces %d resource(s)", plan.target.Name, ps.Destroy, ps.Replace)
	}
	if plan.source != nil && plan.source.Terraform != nil && res.PlanSummary == nil {
		return decline("the fresh Terraform plan back to %s has no summary (%s)", plan.target.Name, res.Verdict.Result)
	}
	return nil
}

// newRollback assembles the rollback's record (changespec.Build, like any
// change): the people and commit of the verified change it returns to,
// the failed revision as the previous one, and spec.rollback.
func (run *planRun) newRollback(attempt int32) *sluicev1.ChangeRequest {
	plan, target := run.plan, run.plan.target
	rb := plan.rollback
	c := run.change(attempt)
	c.Name = plan.name(attempt)
	c.PullRequestAuthor, c.Pushers, c.Authors = target.Spec.PullRequestAuthor, target.Spec.Pushers, target.Spec.Authors
	c.CommitMessage = fmt.Sprintf("Rollback of %s to the verified %s\n\n%s", rb.Of, rb.To, target.Spec.CommitMessage)
	c.PreviousRevision = plan.release.Status.AppliedRevision
	c.Rollback = rb
	return changespec.Build(c)
}

// recordRollback records a rollback on its Release as the newest change.
// The synced tree and commit stay those of the tracked branch: the
// rollback is no push, and the branch's head is not proposed again.
func (r *RepositoryReconciler) recordRollback(ctx context.Context, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) error {
	if rel.Status.LatestChange == cr.Name {
		return nil
	}
	if err := r.Status().Patch(ctx, rel, statusPatch(map[string]*string{"latestChange": &cr.Name}), client.FieldOwner(ControllerName)); err != nil {
		return fmt.Errorf("record rollback %s on release %s: %w", cr.Name, rel.Name, err)
	}
	return nil
}

// declinedMessage is the RolledBack message of a declined rollback of of.
func declinedMessage(of, to, why string) string {
	return fmt.Sprintf("rollback of %s to %s declined: %s; a person decides", of, to, why)
}

// declinedAlready reports whether the syncer declined the rollback of of.
func declinedAlready(rel *sluicev1.Release, of string) bool {
	c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionRolledBack)
	return c != nil && c.Reason == sluicev1.ReasonRollbackDeclined && strings.HasPrefix(c.Message, "rollback of "+of+" ")
}

// declineRollback says on the Release, once, why the rollback of of is not
// built: an Event and RolledBack=False RollbackDeclined.
func (r *RepositoryReconciler) declineRollback(ctx context.Context, rel *sluicev1.Release, of, to, why string) error {
	msg := declinedMessage(of, to, git.Redact(why))
	r.event(rel, corev1.EventTypeWarning, sluicev1.ReasonRollbackDeclined, msg)
	log.FromContext(ctx).Info("Rollback declined", "release", rel.Name, "of", of, "to", to, "why", why)
	return r.setReleaseCondition(ctx, rel, sluicev1.ConditionRolledBack, metav1.ConditionFalse, sluicev1.ReasonRollbackDeclined, msg)
}
