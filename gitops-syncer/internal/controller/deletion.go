package controller

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// eventDeleteProposed: a release left the repository and a Delete
// ChangeRequest waits at the gate for it.
const eventDeleteProposed = "DeleteProposed"

// maxDeletionObjects is the API's limit on spec.deletion.objects.
const maxDeletionObjects = 1000

// pruneOne handles one owned Release after a pass: a release still in the
// branch loses a stale Orphaned condition; a release that left it gets a
// Delete ChangeRequest (prune on) or the Orphaned condition (prune off),
// and is never deleted here. It reports whether the release is orphaned.
func (p *syncPass) pruneOne(ctx context.Context, rel *sluicev1.Release, wanted bool) bool {
	if wanted {
		if c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionOrphaned); c != nil && c.Status == metav1.ConditionTrue {
			if err := p.r.setReleaseCondition(ctx, rel, sluicev1.ConditionOrphaned, metav1.ConditionFalse, sluicev1.ReasonInRepository,
				fmt.Sprintf("back in the repository at %s", sluicev1.ShortSHA(p.head))); err != nil {
				p.retry = append(p.retry, fmt.Sprintf("%s: %s", rel.Name, err))
			}
		}
		return false
	}
	if !p.repo.Spec.Prune {
		if err := p.r.setReleaseCondition(ctx, rel, sluicev1.ConditionOrphaned, metav1.ConditionTrue, sluicev1.ReasonServiceRemoved,
			"the release left the repository and the Repository's prune is off: nothing is proposed, the Release and its workload stay as they are"); err != nil {
			p.retry = append(p.retry, fmt.Sprintf("%s: %s", rel.Name, err))
		}
		return true
	}
	reads, err := p.reads.get()
	name := ""
	if err == nil {
		name, err = p.r.proposeDelete(ctx, p.repo, p.cache, p.head, rel, reads.pushes)
	}
	if err != nil {
		p.fail(ctx, rel.Name, err)
		return false
	}
	if name != "" {
		p.created = append(p.created, name)
	}
	return false
}

// proposeDelete records the Delete ChangeRequest of a release that left the
// tracked branch at head, unless one is already waiting, applying or
// applied, or ended Failed or Rejected without a re-plan asked for. Names
// are deterministic ("<release>-del-<head>", "-rN"), so a pass interrupted
// anywhere resumes without creating anything twice. It returns the name of
// a newly created ChangeRequest.
func (r *RepositoryReconciler) proposeDelete(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, head string, rel *sluicev1.Release, pushes []sluicev1.PushRecord) (string, error) {
	var list sluicev1.ChangeRequestList
	if err := r.APIReader.List(ctx, &list, client.InNamespace(rel.Namespace), client.MatchingLabels{sluicev1.LabelRelease: rel.Name}); err != nil {
		return "", fmt.Errorf("list change requests: %w", err)
	}
	revision, attempt := head, int32(1)
	replan := replanRequested(rel)
	if latest := newestChange(rel.Name, list.Items); latest != nil && latest.IsDelete() {
		switch latest.Status.Phase {
		case sluicev1.PhaseSuperseded:
			// What overtook it is gone; the release is still removed.
		case sluicev1.PhaseFailed, sluicev1.PhaseRejected:
			if replan == "" || latest.Annotations[sluicev1.AnnotationReplan] == replan {
				return "", nil
			}
			revision, attempt = latest.Spec.Revision, attemptOf(latest)+1
		default:
			return r.completeDelete(ctx, repo, cache, rel, latest, replan, pushes)
		}
	}
	taken := map[string]bool{}
	for i := range list.Items {
		taken[list.Items[i].Name] = true
	}
	for taken[sluicev1.DeleteChangeRequestName(rel.Name, revision, attempt)] {
		attempt++
	}
	return r.createDelete(ctx, repo, cache, rel, revision, attempt, replan, pushes)
}

// completeDelete makes sure an existing Delete change has its plan
// Secrets: a crash between the two writes is finished with the same plan,
// or, when a new destroy plan differs, by the next attempt.
func (r *RepositoryReconciler) completeDelete(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, rel *sluicev1.Release, cr *sluicev1.ChangeRequest, replan string, pushes []sluicev1.PushRecord) (string, error) {
	ok, err := r.planSecretsComplete(ctx, cr)
	if err != nil || ok {
		return "", err
	}
	if cr.Status.Phase.IsTerminal() || cr.Status.Phase == sluicev1.PhaseApplying {
		return "", nil
	}
	d, err := r.describeDelete(ctx, repo, cache, rel)
	if err != nil {
		return "", err
	}
	if d.res.PlanFileSHA256 == cr.Spec.PlanFileSHA256 {
		return "", r.writePlanSecrets(ctx, cr, d.res.PlanFile)
	}
	log.FromContext(ctx).Info("Destroy plan of an existing Delete change is lost; planning a new attempt", "changeRequest", cr.Name)
	return r.createDelete(ctx, repo, cache, rel, cr.Spec.Revision, attemptOf(cr)+1, replan, pushes)
}

// createDelete describes the removal and creates the Delete change, its
// plan Secrets, and the syncer's status of the Release.
func (r *RepositoryReconciler) createDelete(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, rel *sluicev1.Release, revision string, attempt int32, replan string, pushes []sluicev1.PushRecord) (string, error) {
	if attempt > maxAttempts {
		return "", fmt.Errorf("release %s: more than %d Delete attempts at %s", rel.Name, maxAttempts, sluicev1.ShortSHA(revision))
	}
	d, err := r.describeDelete(ctx, repo, cache, rel)
	if err != nil {
		return "", err
	}
	commit, err := cache.Commit(revision)
	if err != nil {
		return "", err
	}
	cr := r.newDeleteChangeRequest(repo, cache, rel, d, revision, attempt, commit, replan, pushes)
	want := cr.Spec.PlanFileSHA256
	cr, created, err := r.creator().Create(ctx, rel, cr)
	if err != nil {
		return "", err
	}
	if !created && (!cr.IsDelete() || cr.Spec.PlanFileSHA256 != want) {
		return "", fmt.Errorf("change request %s exists with other content; retrying", cr.Name)
	}
	if created {
		msg := fmt.Sprintf("Delete ChangeRequest %s: %s left the repository at %s; nothing is removed before it is approved", cr.Name, rel.Name, sluicev1.ShortSHA(revision))
		r.event(rel, corev1.EventTypeNormal, eventDeleteProposed, msg)
		r.event(repo, corev1.EventTypeNormal, eventDeleteProposed, msg)
		log.FromContext(ctx).Info("Proposed deletion", "release", rel.Name, "changeRequest", cr.Name)
	}
	if len(d.res.PlanFile) > 0 {
		if err := r.writePlanSecrets(ctx, cr, d.res.PlanFile); err != nil {
			return "", err
		}
	}
	if err := r.recordDeleteProposed(ctx, rel, revision, cr, replan); err != nil {
		return "", err
	}
	if !created {
		return "", nil
	}
	return cr.Name, nil
}

// deletion is a release described at the revision it is removed from.
type deletion struct {
	basis string // the applied revision (else the last synced one)
	svc   *manifest.Service
	art   *artifact.Artifact
	key   artifact.Key
	res   *validation.DeleteResult
	// was is what was applied (appliedOf), with the source completed from
	// the manifest at basis when the applied change recorded none.
	was *appliedState
}

// describeDelete builds the release's artifact at its last applied
// revision (the last synced one when it was never applied), and has the
// validator list the applied objects and plan the destroy of the applied
// configuration. Nothing of the commit that removed the release is used.
func (r *RepositoryReconciler) describeDelete(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, rel *sluicev1.Release) (*deletion, error) {
	planner, ok := r.Validator.(validation.DeletePlanner)
	if !ok {
		return nil, errors.New("the validator cannot describe deletions")
	}
	was, err := r.appliedOf(ctx, rel)
	if err != nil {
		return nil, err
	}
	basis := was.revision
	if basis == "" || !cache.HasCommit(basis) {
		return nil, fmt.Errorf("the revision %q of release %s is not in the local git cache, so its removal cannot be described", sluicev1.ShortSHA(basis), rel.Name)
	}
	fsys, entries, err := r.servicesAt(cache, repo, basis, "delete-")
	if err != nil {
		return nil, fmt.Errorf("find services at %s: %w", sluicev1.ShortSHA(basis), err)
	}
	entry, envName := appliedEntry(entries, rel.Name, was.source)
	if entry == nil {
		return nil, fmt.Errorf("release %s is not in the repository at its revision %s", rel.Name, sluicev1.ShortSHA(basis))
	}
	if err := was.completeFrom(entry, envName); err != nil {
		return nil, err
	}
	art, err := artifact.Build(fsys, entry.Inputs)
	if err != nil {
		return nil, fmt.Errorf("build artifact at %s: %w", sluicev1.ShortSHA(basis), err)
	}
	key := artifact.Key{Namespace: repo.Namespace, Repository: repo.Name, Revision: basis, Release: rel.Name}.WithDigest(art.SHA256)
	if err := r.Store.Put(key, art.TarGz); err != nil {
		return nil, err
	}
	ws, err := changespec.NewWorkspace(r.ScratchDir, "delete-", art.TarGz)
	if err != nil {
		return nil, err
	}
	defer ws.Remove()
	res, err := planner.PlanDelete(ctx, validation.DeleteRequest{
		RepoRoot: ws.Current, Service: entry.Service, Environment: envName,
		ControlNamespace: repo.Namespace, Release: rel.Name,
	})
	if err != nil {
		return nil, fmt.Errorf("describe the removal of %s: %w", rel.Name, err)
	}
	return &deletion{basis: basis, svc: entry.Service, art: art, key: key, res: res, was: was}, nil
}

// newDeleteChangeRequest assembles the immutable record of a removal
// through changespec.Build, like every change. Where, how and what it
// removes is what was applied (d.was): the applied namespace, delivery and
// source, never the Release's current spec, which an unapproved push may
// have moved. Its rule is the release's applied rule (the rule in force;
// the removed environment's rule in git is gone and never loosens it), its
// risk high.
func (r *RepositoryReconciler) newDeleteChangeRequest(repo *sluicev1.Repository, cache *git.Repo, rel *sluicev1.Release, d *deletion, revision string,
	attempt int32, commit git.CommitInfo, replan string, pushes []sluicev1.PushRecord) *sluicev1.ChangeRequest {
	emails, err := cache.Authors(revision, d.basis, 1000)
	if err != nil {
		emails = []string{commit.AuthorEmail, commit.CommitterEmail}
	}
	was := d.was
	del := &sluicev1.DeletionSpec{
		AppliedChange:   rel.Status.AppliedChange,
		AppliedRevision: rel.Status.AppliedRevision,
		AppliedDigest:   rel.Status.AppliedDigest,
		TargetNamespace: was.namespace,
		Delivery:        was.delivery,
		Source:          was.source,
		Objects:         deletionObjects(d.res.Objects),
	}
	del.ObjectsTruncated = int32(max(0, len(d.res.Objects)-maxDeletionObjects))
	if was.delivery == sluicev1.DeliveryArgoCD {
		del.Application = rel.Name
	}
	if dir := d.svc.TerraformDir(); dir != "" && len(d.res.PlanFile) > 0 {
		del.Terraform = was.source.Terraform.DeepCopy()
		if del.Terraform == nil {
			del.Terraform = &sluicev1.TerraformSource{Dir: sluicev1.RelativePath(dir)}
		}
	}
	previous := ""
	if len(d.basis) >= 40 && d.basis != revision {
		previous = d.basis
	}
	manifestFile := path.Join(string(was.source.Path), manifest.FileName)
	summary := fmt.Sprintf("removes release %s: %d object(s) in %s", rel.Name, len(d.res.Objects), was.namespace)
	if s := d.res.PlanSummary; s != nil {
		summary += fmt.Sprintf(", destroys %d Terraform resource(s)", s.Destroy)
	}
	findings := []sluicev1.Finding{{Severity: sluicev1.SeverityInfo, Source: "manifest", Policy: "delete", Resource: rel.Name, Message: summary, File: manifestFile}}
	for _, n := range was.notes {
		findings = append(findings, sluicev1.Finding{Severity: sluicev1.SeverityUnverifiable, Source: "manifest", Policy: "delete.applied", Resource: rel.Name,
			Message: n, File: manifestFile})
	}
	res := d.res.Result
	return changespec.Build(changespec.Change{
		Repository:       repo,
		Release:          rel.Name,
		Service:          was.source.Service,
		Environment:      string(was.source.Environment),
		ServiceDir:       string(was.source.Path),
		Source:           was.source,
		Operation:        sluicev1.OperationDelete,
		Deletion:         del,
		Name:             sluicev1.DeleteChangeRequestName(rel.Name, revision, attempt),
		Revision:         revision,
		Attempt:          attempt,
		PreviousRevision: previous,
		Authors:          changespec.EmailIdentities(emails),
		Pushers:          pushersBetween(pushes, cache, revision, rel.Status.AppliedRevision),
		CommitMessage:    commit.Message,
		TargetNamespace:  was.namespace,
		Delivery:         was.delivery,
		Rule:             *was.rule,
		Artifact:         d.art,
		ArtifactURL:      d.key.URL(r.ArtifactBaseURL),
		Result:           &res,
		Findings:         findings,
		Replan:           replan,
	})
}

// deletionObjects trims the objects of the applied manifest to the API's
// limits, sorted by kind, namespace and name.
func deletionObjects(in []sluicev1.ObjectReference) []sluicev1.ObjectReference {
	var out []sluicev1.ObjectReference
	for _, o := range in {
		if len(out) == maxDeletionObjects {
			break
		}
		o.APIVersion, o.Kind = text.Truncate(o.APIVersion, 250), text.Truncate(o.Kind, 60)
		o.Namespace, o.Name = text.Truncate(o.Namespace, 63), text.Truncate(o.Name, 250)
		out = append(out, o)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		return a.Kind+"/"+a.Namespace+"/"+a.Name < b.Kind+"/"+b.Namespace+"/"+b.Name
	})
	return out
}

// recordDeleteProposed writes the syncer's status of a removed Release:
// the Delete change is its latest, and its input hash is cleared, so a push
// that brings the release back makes a new change (which supersedes the
// pending Delete) even with the same inputs as before.
func (r *RepositoryReconciler) recordDeleteProposed(ctx context.Context, rel *sluicev1.Release, revision string, cr *sluicev1.ChangeRequest, replan string) error {
	if rel.Status.LastSyncedTree != "" || rel.Status.LastSyncedCommit != revision || rel.Status.LatestChange != cr.Name {
		patch := statusPatch(map[string]*string{"lastSyncedTree": nil, "lastSyncedCommit": &revision, "latestChange": &cr.Name})
		if err := r.Status().Patch(ctx, rel, patch, client.FieldOwner(ControllerName)); err != nil {
			return fmt.Errorf("record proposed deletion of release %s: %w", rel.Name, err)
		}
	}
	if err := r.setSynced(ctx, rel, metav1.ConditionTrue, sluicev1.ReasonServiceRemoved,
		fmt.Sprintf("left the repository at %s; %s proposes its removal", sluicev1.ShortSHA(revision), cr.Name)); err != nil {
		return err
	}
	if replan != "" && rel.Annotations[annotationReplanHandled] != replan {
		if err := r.Patch(ctx, rel, annotationPatch(annotationReplanHandled, replan), client.FieldOwner(ControllerName)); err != nil {
			return fmt.Errorf("mark re-plan of release %s handled: %w", rel.Name, err)
		}
	}
	return nil
}

// newestChange is the newest non-preview ChangeRequest of a release: by
// creation, then attempt at the same revision.
func newestChange(release string, all []sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	var newest *sluicev1.ChangeRequest
	for i := range all {
		cr := &all[i]
		if cr.Spec.Release != release || (cr.Spec.PullRequest != nil && cr.Spec.PullRequest.Preview) {
			continue
		}
		if newest == nil {
			newest = cr
			continue
		}
		switch c := cr.CreationTimestamp.Compare(newest.CreationTimestamp.Time); {
		case c > 0:
			newest = cr
		case c == 0 && (attemptOf(cr) > attemptOf(newest) || (attemptOf(cr) == attemptOf(newest) && strings.Compare(cr.Name, newest.Name) > 0)):
			newest = cr
		}
	}
	return newest
}

func attemptOf(cr *sluicev1.ChangeRequest) int32 {
	if cr.Spec.Attempt < 1 {
		return 1
	}
	return cr.Spec.Attempt
}
