package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// maxAttempts bounds the "-rN" names one pass may try.
const maxAttempts = 50

// planChange builds the artifact, validates it and records the
// ChangeRequest, its plan Secrets, the Release's spec (from the change)
// and then the Release status. Names are deterministic, so a pass
// interrupted anywhere resumes without creating anything twice. It returns
// the name of a newly created ChangeRequest.
//
// The steps, in order: store the artifact (what is validated is exactly
// what will be applied) and validate it; find where an earlier pass
// stopped; then try one ChangeRequest name after the other until one
// carries the change. Finding where an earlier pass stopped is a read of
// the API server that depends on nothing else, so it runs beside the
// artifact and the validation (which almost every pass needs: only a pass
// resuming a change recorded in full does without it).
func (r *RepositoryReconciler) planChange(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, plan *changePlan) (string, error) {
	run := &planRun{r: r, repo: repo, cache: cache, plan: plan}
	type resumeAt struct {
		existing *sluicev1.ChangeRequest
		attempt  int
		err      error
	}
	resumed := make(chan resumeAt, 1)
	go func() {
		existing, attempt, err := r.resumePoint(ctx, plan)
		resumed <- resumeAt{existing, attempt, err}
	}()
	err := run.storeArtifact()
	if err == nil {
		err = run.checkRollbackContent()
	}
	if err == nil {
		_, err = run.validation(ctx)
	}
	at := <-resumed
	if err != nil {
		return "", err
	}
	existing, attempt := at.existing, at.attempt
	if at.err != nil {
		return "", at.err
	}
	for ; attempt <= maxAttempts; attempt, existing = attempt+1, nil {
		if done, err := run.attempt(ctx, int32(attempt), existing); err != nil || done {
			return run.created, err
		}
	}
	return "", fmt.Errorf("release %s: more than %d attempts at %s", plan.release.Name, maxAttempts, sluicev1.ShortSHA(plan.revision))
}

// planRun is one planChange: the artifact it built, the validation it
// ran (once, on first need) and the ChangeRequest it created.
type planRun struct {
	r     *RepositoryReconciler
	repo  *sluicev1.Repository
	cache *git.Repo
	plan  *changePlan
	art   *artifact.Artifact
	key   artifact.Key
	// result is the validation, once run; nil for an invalid change.
	result    *validation.Result
	validated bool
	// created names the ChangeRequest this run created, once it is
	// recorded in full.
	created string
}

// storeArtifact builds the release's artifact at the revision and stores
// it. An artifact that cannot be built (a symlink leaving the repository)
// becomes a deny finding and an artifact of the manifest alone.
func (run *planRun) storeArtifact() error {
	plan := run.plan
	fsys, err := run.cache.FS(plan.revision)
	if err != nil {
		return err
	}
	err = refuseRemoteBasesDir(fsys)
	inputs := plan.inputs
	if err == nil {
		fsys, inputs, err = withFetched(fsys, plan.inputs, plan.chart, plan.bases, plan.kcharts)
	}
	var art *artifact.Artifact
	if err == nil {
		art, err = artifact.Build(fsys, inputs)
	}
	if err != nil {
		plan.invalid = append(plan.invalid, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "artifact", Message: git.Redact(err.Error())})
		art, err = artifact.Build(fsys, []string{string(plan.spec.SourcePath) + "/" + manifest.FileName})
		if err != nil {
			return fmt.Errorf("build artifact: %w", err)
		}
	}
	run.art = art
	// Under its sha256: a second change at this commit (a new chart
	// version) must not replace what the first was approved on.
	run.key = artifact.Key{Namespace: run.repo.Namespace, Repository: run.repo.Name, Revision: plan.revision, Release: plan.release.Name}.WithDigest(art.SHA256)
	return run.r.Store.Put(run.key, art.TarGz)
}

// attempt records the change as ChangeRequest number n: it finishes the
// one of that name when it exists (existing, or one that creating it
// finds), and creates it otherwise. It reports false when that name cannot
// carry the change (its content differs, or its plan is lost and a new
// plan differs): only the next attempt can.
func (run *planRun) attempt(ctx context.Context, n int32, existing *sluicev1.ChangeRequest) (bool, error) {
	if existing == nil || existing.Name != run.plan.name(n) {
		found, err := run.create(ctx, n)
		if err != nil || found == nil {
			return true, err
		}
		existing = found
	}
	return run.resume(ctx, existing)
}

// resume finishes a ChangeRequest made for this revision before (a pass
// interrupted after its create): its plan Secrets, the Release's spec and
// status. It reports false when that change cannot be finished: its
// content differs, or its plan is lost and a new plan differs.
func (run *planRun) resume(ctx context.Context, existing *sluicev1.ChangeRequest) (bool, error) {
	if existing.Spec.ContentDigest != sluicev1.Digest(run.art.ContentDigest) {
		return false, nil
	}
	if err := run.r.afterCreated(existing); err != nil {
		return false, err
	}
	if ok, err := run.restorePlan(ctx, existing); err != nil || !ok {
		return false, err
	}
	return true, run.r.recordChange(ctx, run.plan, existing)
}

// restorePlan makes sure the plan Secrets of existing hold its plan: a
// lost plan is written again from a new validation when that plans the
// same file. It reports false when the new plan differs.
func (run *planRun) restorePlan(ctx context.Context, existing *sluicev1.ChangeRequest) (bool, error) {
	if ok, err := run.r.planSecretsComplete(ctx, existing); err != nil || ok {
		return ok, err
	}
	res, err := run.validation(ctx)
	if err != nil {
		return false, err
	}
	if res == nil || res.PlanFileSHA256 != existing.Spec.PlanFileSHA256 {
		log.FromContext(ctx).Info("Plan of an existing ChangeRequest is lost; planning a new attempt", "release", run.plan.release.Name, "changeRequest", existing.Name)
		return false, nil
	}
	return true, run.r.writePlanSecrets(ctx, existing, res.PlanFile)
}

// create validates the change and records it as attempt n: nothing when
// it renders what is applied (the Release says "unchanged"), the
// ChangeRequest of that name when one exists already (found, for resume),
// or the new ChangeRequest with its plan Secrets, review and the Release's
// spec and status.
func (run *planRun) create(ctx context.Context, n int32) (found *sluicev1.ChangeRequest, err error) {
	res, err := run.validation(ctx)
	if err != nil {
		return nil, err
	}
	if err := checkRollbackPlan(run.plan, res); err != nil {
		return nil, err
	}
	if unchanged, err := run.recordIfUnchanged(ctx, res); err != nil || unchanged {
		return nil, err
	}
	cr, err := run.newChangeRequest(ctx, n)
	if err != nil {
		return nil, err
	}
	stored, created, err := run.r.creator().Create(ctx, run.plan.release, cr)
	if err != nil || !created {
		return stored, err
	}
	run.announce(ctx, cr)
	if err := run.r.afterCreated(cr); err != nil {
		return nil, err
	}
	// What is stored beside the change and the Release's record of it are
	// independent writes: side by side (a pass interrupted in either
	// resumes both, see resume).
	outputs := make(chan error, 1)
	go func() { outputs <- run.storeOutputs(ctx, cr, res) }()
	recorded := run.r.recordChange(ctx, run.plan, cr)
	if err := errors.Join(<-outputs, recorded); err != nil {
		return nil, err
	}
	run.created = cr.Name
	return nil, nil
}

// validation runs the validator once (never for an invalid change) and
// returns its result.
func (run *planRun) validation(ctx context.Context) (*validation.Result, error) {
	if run.validated || run.plan.invalid != nil {
		return run.result, nil
	}
	res, err := run.r.validate(ctx, run.repo, run.cache, run.plan, run.art)
	if err != nil {
		return nil, err
	}
	run.result, run.validated = res, true
	return res, nil
}

// recordIfUnchanged records on the Release that the change renders what is
// applied (unchangedFromApplied, recordUnchanged) and reports whether it
// did; a re-plan always makes a new ChangeRequest.
func (run *planRun) recordIfUnchanged(ctx context.Context, res *validation.Result) (bool, error) {
	if run.plan.replan != "" || run.plan.rollback != nil {
		return false, nil
	}
	applied, err := run.r.unchangedFromApplied(ctx, run.plan, res)
	if err != nil || applied == nil {
		return false, err
	}
	return true, run.r.recordUnchanged(ctx, run.plan, applied)
}

// announce says a ChangeRequest was created: an Event on the Release and a
// log line.
func (run *planRun) announce(ctx context.Context, cr *sluicev1.ChangeRequest) {
	rel := run.plan.release
	if rb := cr.Spec.Rollback; rb != nil {
		run.r.event(rel, corev1.EventTypeNormal, eventRollbackProposed,
			fmt.Sprintf("Rollback ChangeRequest %s: rollback of %s to %s (revision %s): verdict %s, risk %s", cr.Name, rb.Of, rb.To, sluicev1.ShortSHA(run.plan.revision), cr.Spec.Verdict.Result, cr.Spec.Verdict.Risk))
		log.FromContext(ctx).Info("Created rollback ChangeRequest", "release", rel.Name, "changeRequest", cr.Name, "of", rb.Of, "to", rb.To)
		return
	}
	run.r.event(rel, corev1.EventTypeNormal, eventChangeRequestCreated,
		fmt.Sprintf("ChangeRequest %s for %s: verdict %s, risk %s", cr.Name, sluicev1.ShortSHA(run.plan.revision), cr.Spec.Verdict.Result, cr.Spec.Verdict.Risk))
	log.FromContext(ctx).Info("Created ChangeRequest", "release", rel.Name, "changeRequest", cr.Name, "verdict", cr.Spec.Verdict.Result)
}

// storeOutputs stores what the validation of a new ChangeRequest produced
// beside it: the plan file in its plan Secrets, the review `kubectl sluice
// diff` shows before an approve (the plan and the manifest diff against
// the last applied revision), and a withheld plan error's full text for
// approvers. An invalid change has none.
func (run *planRun) storeOutputs(ctx context.Context, cr *sluicev1.ChangeRequest, res *validation.Result) error {
	if res == nil {
		return nil
	}
	r := run.r
	if len(res.PlanFile) > 0 {
		if err := r.writePlanSecrets(ctx, cr, res.PlanFile); err != nil {
			return err
		}
	}
	in := changespec.ReviewInput(res, previousRevision(run.plan.release))
	if cr.Spec.Source != nil && (cr.Spec.Source.Chart.Repo != "" || len(cr.Spec.Source.HelmCharts) > 0) {
		// The chart version diffs: against the applied change's charts.
		if applied, err := r.recordedChange(ctx, run.plan.release, run.plan.release.Status.AppliedChange); err == nil && applied != nil && applied.Spec.Source != nil {
			c := applied.Spec.Source.Chart
			in.PreviousChart = &c
			in.PreviousHelmCharts = applied.Spec.Source.HelmCharts
		}
	}
	if err := changespec.StoreReview(ctx, r.Client, ControllerName, cr, in); err != nil {
		// diff then shows less; the change stands.
		log.FromContext(ctx).Error(err, "Storing the review of a ChangeRequest failed", "changeRequest", cr.Name)
	}
	return changespec.StorePlanError(ctx, r.Client, ControllerName, cr, res)
}

// afterCreated runs the test hook that stops a pass right after a
// ChangeRequest is created (or found made by an interrupted pass).
func (r *RepositoryReconciler) afterCreated(cr *sluicev1.ChangeRequest) error {
	if h := r.Hooks.AfterChangeRequestCreated; h != nil {
		return h(cr)
	}
	return nil
}

// changePeople are the people a change records: the commit e-mails since
// the applied revision, the merged pull requests' author and pushers, and
// the provider identities that pushed.
type changePeople struct {
	commit   git.CommitInfo
	authors  []sluicev1.Identity
	pushers  []sluicev1.Identity
	prAuthor sluicev1.Identity
	merged   []int64
}

// people collects the change's people from the cache, the recorded pushes
// and the previews of the pull requests it merges.
func (run *planRun) people(ctx context.Context) (changePeople, error) {
	plan, cache := run.plan, run.cache
	rel := plan.release
	commit, err := cache.Commit(plan.revision)
	if err != nil {
		return changePeople{}, err
	}
	var reads passReads
	if plan.reads != nil {
		if reads, err = plan.reads.get(); err != nil {
			return changePeople{}, err
		}
	}
	base := authorsBase(rel, cache)
	if plan.pullRequests == nil {
		plan.pullRequests = mergedPullRequests(reads.previews, cache, plan.revision, base)
	}
	emails, err := cache.Authors(plan.revision, base, 1000)
	if err != nil {
		emails = []string{commit.AuthorEmail, commit.CommitterEmail}
	}
	p := changePeople{commit: commit, authors: changespec.EmailIdentities(emails)}
	// Whoever pushed the commits since the applied revision (all recorded
	// pushes when nothing was applied), as the provider authenticated
	// them: they are authors for the gate.
	p.pushers = pushersBetween(reads.pushes, cache, plan.revision, rel.Status.AppliedRevision)
	for _, pr := range plan.pullRequests {
		p.merged = append(p.merged, pr.number)
		if pr.author != "" && !slices.Contains(p.authors, pr.author) {
			p.authors = append(p.authors, pr.author)
		}
		for _, id := range pr.pushers {
			p.pushers = changespec.AddIdentity(p.pushers, id)
		}
	}
	if len(plan.pullRequests) == 1 {
		p.prAuthor = plan.pullRequests[0].author
	}
	return p, nil
}

// newChangeRequest assembles the immutable record of the change
// (changespec.Build): its people and what the manifest at the revision
// says (plan.spec, plan.source).
func (run *planRun) newChangeRequest(ctx context.Context, attempt int32) (*sluicev1.ChangeRequest, error) {
	if run.plan.rollback != nil {
		return run.newRollback(attempt), nil
	}
	people, err := run.people(ctx)
	if err != nil {
		return nil, err
	}
	plan := run.plan
	rel := plan.release
	// The verification's templates are read from the revision.
	files, err := run.cache.FS(plan.revision)
	if err != nil {
		return nil, err
	}
	previous := ""
	if prev := rel.Status.LastSyncedCommit; prev != plan.revision && len(prev) >= 40 {
		previous = prev
	}
	c := run.change(attempt)
	c.Name = sluicev1.ChangeRequestName(rel.Name, plan.revision, attempt)
	c.PullRequestAuthor, c.Pushers, c.Authors = people.prAuthor, people.pushers, people.authors
	c.CommitMessage = people.commit.Message
	c.PreviousRevision = previous
	c.Replan = plan.replan
	c.Files = files
	c.MergedPullRequests = people.merged
	return changespec.Build(c), nil
}

// change is what every change of this plan says, a push's or a
// rollback's: where it comes from, what it renders to and its verdict.
func (run *planRun) change(attempt int32) changespec.Change {
	plan, spec := run.plan, run.plan.spec
	return changespec.Change{
		Repository:      run.repo,
		Release:         plan.release.Name,
		Service:         spec.Service,
		Environment:     string(spec.Environment),
		ServiceDir:      string(spec.SourcePath),
		Source:          plan.source,
		Revision:        plan.revision,
		Attempt:         attempt,
		TargetNamespace: spec.TargetNamespace,
		Delivery:        spec.Delivery,
		Rule:            spec.Rule,
		Artifact:        run.art,
		ArtifactURL:     run.key.URL(run.r.ArtifactBaseURL),
		Result:          run.result,
		Findings:        plan.invalid,
		InputsErr:       plan.inputsErr,
		Verification:    changespec.VerificationBlockOf(plan.service, plan.env),
	}
}
