package controller

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// changePlan is one release at one revision to turn into a ChangeRequest.
type changePlan struct {
	release  *sluicev1.Release
	revision string
	inputs   []string
	tree     string
	service  *manifest.Service // nil for an invalid manifest
	env      string
	// replan is the unhandled re-plan annotation value, if any.
	replan string
	// invalid holds the findings of a manifest that does not parse; the
	// change is then rejected without validation.
	invalid []sluicev1.Finding
	// inputsErr says why the stack's modules could not be listed; a deny
	// finding unless terraform already rejected the stack.
	inputsErr error
	// pullRequests are the merged pull requests whose heads the revision
	// brings in (mergedPullRequests).
	pullRequests []mergedPR
	// spec is what the manifest at the revision asks of the Release
	// (desiredRelease); for an invalid manifest, the Release's spec. It is
	// written to the Release only once a ChangeRequest records it.
	spec *sluicev1.ReleaseSpec
	// source is the change's source (changespec.SourceOf); nil for an
	// invalid manifest.
	source *sluicev1.ChangeSource
	// reads are the sync pass's fresh reads (the recorded pushes, the
	// previews, the names of the ChangeRequests), under way while the
	// artifact is built and validated. Nil for a rollback: resumePoint
	// lists the release's ChangeRequests itself, and a rollback records
	// no pushers or merged pull requests.
	reads *pendingReads
	// rollback, when set, makes the change the rollback the operator
	// asked for, rebuilt at target's revision (rollback.go).
	rollback *sluicev1.RollbackSpec
	target   *sluicev1.ChangeRequest
	// chart is the chart fetched from a chart repository, which the
	// artifact carries (sources.RemoteChartDir); nil for others.
	chart *chartrepo.Chart
	// bases are the Kustomize remote bases fetched for the artifact.
	bases []fetchedBase
	// kcharts are the charts fetched for the overlay's helmCharts entries.
	kcharts []fetchedKChart
}

// name is the ChangeRequest name of attempt n of the change.
func (p *changePlan) name(n int32) string {
	if p.rollback != nil {
		return sluicev1.RollbackChangeRequestName(p.release.Name, p.rollback.Of, n)
	}
	return sluicev1.ChangeRequestName(p.release.Name, p.revision, n)
}

// mergedPR is a previewed pull request whose head is in the history of a
// synced revision: its author and pushers, from its previews.
type mergedPR struct {
	number  int64
	head    string
	author  sluicev1.Identity
	pushers []sluicev1.Identity
}

// mergedPullRequests returns, among previews (oldest first), the
// previewed pull requests whose head commit is in the history of revision
// but not of base ("" for none): the pull requests a change at revision
// merges. Squash and rebase merges rewrite the head and are not found
// (their previews are deleted when the pull request closes).
func mergedPullRequests(previews []sluicev1.ChangeRequest, cache *git.Repo, revision, base string) []mergedPR {
	byNumber := map[int64]*mergedPR{}
	var order []int64
	merged := map[int64]bool{}
	for _, cr := range previews {
		pr := cr.Spec.PullRequest
		if pr == nil || !pr.Preview {
			continue
		}
		m, ok := byNumber[pr.Number]
		if !ok {
			m = &mergedPR{number: pr.Number}
			byNumber[pr.Number] = m
			order = append(order, pr.Number)
		}
		if cr.Spec.PullRequestAuthor != "" {
			m.author = cr.Spec.PullRequestAuthor
		}
		for _, id := range cr.Spec.Pushers {
			m.pushers = changespec.AddIdentity(m.pushers, id)
		}
		if merged[pr.Number] || !cache.HasCommit(pr.HeadSHA) {
			continue
		}
		in, err := cache.IsAncestor(pr.HeadSHA, revision)
		if err != nil || !in {
			continue
		}
		if base != "" && cache.HasCommit(base) {
			if before, err := cache.IsAncestor(pr.HeadSHA, base); err == nil && before {
				continue
			}
		}
		merged[pr.Number], m.head = true, pr.HeadSHA
	}
	out := []mergedPR{}
	for _, n := range order {
		if merged[n] {
			out = append(out, *byNumber[n])
		}
	}
	return out
}

// deleteMergedPreviews deletes, among previews (those the pass read, whose
// people its changes recorded), the previews of pull requests whose head
// is in the history of the synced head. A preview created after the read
// stays for the next pass, which reads its people first.
func (r *RepositoryReconciler) deleteMergedPreviews(ctx context.Context, previews []sluicev1.ChangeRequest, cache *git.Repo, head string) error {
	heads := map[int64]bool{}
	for _, cr := range previews {
		if pr := cr.Spec.PullRequest; pr != nil && pr.Preview && cache.HasCommit(pr.HeadSHA) {
			if in, err := cache.IsAncestor(pr.HeadSHA, head); err == nil && in {
				heads[pr.Number] = true
			}
		}
	}
	var errs []error
	for i := range previews {
		cr := &previews[i]
		if pr := cr.Spec.PullRequest; pr == nil || !pr.Preview || !heads[pr.Number] {
			continue
		}
		if err := r.Delete(ctx, cr, client.Preconditions{UID: &cr.UID}); client.IgnoreNotFound(err) != nil {
			errs = append(errs, fmt.Errorf("delete merged preview %s: %w", cr.Name, err))
		}
	}
	return errors.Join(errs...)
}

func asManifestError(err error, target **manifest.Error) bool { return errors.As(err, target) }

// creator is the syncer's one path for storing a ChangeRequest.
func (r *RepositoryReconciler) creator() changespec.Creator {
	c := changespec.Creator{Client: r.Client, Reader: r.APIReader, FieldOwner: ControllerName}
	if r.Metrics != nil {
		c.Created = r.Metrics.ChangeRequestsCreated
	}
	return c
}

// unchangedFromApplied returns the applied ChangeRequest of the release
// when a change at plan's revision would change nothing: its inputs moved
// but the rendered manifest, the Terraform plan (none, or one without any
// action), the target namespace and the delivery equal what is applied, the
// verdict does not fail, and no other change of the release is in flight
// (one that a newer commit must supersede). Nothing is then asked of
// anyone: there is nothing to approve. It returns nil otherwise.
func (r *RepositoryReconciler) unchangedFromApplied(ctx context.Context, plan *changePlan, res *validation.Result) (*sluicev1.ChangeRequest, error) {
	rel := plan.release
	st := rel.Status
	if res == nil || plan.invalid != nil || st.AppliedChange == "" || st.LatestChange != st.AppliedChange || res.ManifestDigest == "" ||
		res.Verdict.Result == sluicev1.VerdictFail {
		return nil, nil
	}
	if len(res.PlanFile) > 0 || res.PlanDigest != "" {
		ps := res.PlanSummary
		if ps == nil || ps.Add+ps.Change+ps.Destroy+ps.Replace != 0 {
			return nil, nil
		}
	}
	applied := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: rel.Namespace, Name: st.AppliedChange}, applied); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read applied change %s: %w", st.AppliedChange, err)
	}
	a := applied.Spec
	if !applied.Status.Phase.WasApplied() || a.Release != rel.Name || a.ManifestDigest != res.ManifestDigest ||
		a.TargetNamespace != plan.spec.TargetNamespace || a.Delivery != plan.spec.Delivery.OrDefault() || !sameSource(a.Source, plan.source) {
		return nil, nil
	}
	return applied, nil
}

// resumePoint finds where to continue: the ChangeRequest already made for
// this revision (and re-plan value), or the next attempt number.
//
// It works from fresh reads of the API server, but only of the names of
// the release's ChangeRequests (a metadata list: the full list grows with
// the release's history, ~60 ms a sync after 40 changes), read at the
// start of the sync pass beside the fetch (plan.reads) or here (a
// rollback); only those named as an attempt of this change
// (changeAttemptNames) are read in full and checked as before. A name
// created after the read is not missed: creating it finds it (Creator),
// and the change resumes there.
func (r *RepositoryReconciler) resumePoint(ctx context.Context, plan *changePlan) (*sluicev1.ChangeRequest, int, error) {
	var names []metav1.PartialObjectMetadata
	if plan.reads != nil {
		reads, err := plan.reads.get()
		if err != nil {
			return nil, 0, err
		}
		names = reads.changesOf(plan.release.Name)
	} else {
		var err error
		if names, err = r.listChangeNames(ctx, plan.release.Namespace, client.MatchingLabels{sluicev1.LabelRelease: plan.release.Name}); err != nil {
			return nil, 0, err
		}
	}
	var atRev []*sluicev1.ChangeRequest
	for _, name := range changeAttemptNames(plan, names) {
		cr := &sluicev1.ChangeRequest{}
		if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: plan.release.Namespace, Name: name}, cr); err != nil {
			if apierrors.IsNotFound(err) {
				continue // deleted since the list
			}
			return nil, 0, fmt.Errorf("read change request %s: %w", name, err)
		}
		if plan.rollback != nil {
			// A rollback resumes only a rollback of the same failed change.
			if rb := cr.Spec.Rollback; rb != nil && rb.Of == plan.rollback.Of {
				atRev = append(atRev, cr)
			}
			continue
		}
		if cr.Spec.Revision == plan.revision && cr.Spec.PullRequest == nil && cr.Spec.Rollback == nil {
			atRev = append(atRev, cr)
		}
	}
	sort.Slice(atRev, func(i, j int) bool { return atRev[i].Spec.Attempt < atRev[j].Spec.Attempt })
	if len(atRev) == 0 {
		return nil, 1, nil
	}
	newest := atRev[len(atRev)-1]
	attemptOf := func(cr *sluicev1.ChangeRequest) int {
		if cr.Spec.Attempt < 1 {
			return 1
		}
		return int(cr.Spec.Attempt)
	}
	if plan.replan == "" {
		return newest, attemptOf(newest), nil
	}
	for _, cr := range atRev {
		if cr.Annotations[sluicev1.AnnotationReplan] == plan.replan {
			return cr, attemptOf(cr), nil
		}
	}
	return nil, attemptOf(newest) + 1, nil
}

// changeAttemptNames returns the names among items that attempts of plan's
// change carry (plan.name(1), then "-r2", "-r3"…): every ChangeRequest this
// syncer made for the change has one, whatever else the release holds.
func changeAttemptNames(plan *changePlan, items []metav1.PartialObjectMetadata) []string {
	first := plan.name(1)
	var out []string
	for i := range items {
		name := items[i].Name
		if name == first {
			out = append(out, name)
			continue
		}
		n, ok := strings.CutPrefix(name, first+"-r")
		if !ok {
			continue
		}
		if a, err := strconv.Atoi(n); err == nil && a > 1 && plan.name(int32(a)) == name {
			out = append(out, name)
		}
	}
	return out
}

// validate has the change's artifact validated as it will be applied
// (changespec.Validate); the Helm risk is rated against the release at its
// previous revision (previousFor). A rendered manifest is remembered as the
// previous one of the release's next change.
func (r *RepositoryReconciler) validate(ctx context.Context, repo *sluicev1.Repository, cache *git.Repo, plan *changePlan, art *artifact.Artifact) (*validation.Result, error) {
	req := validation.Request{
		Service:          plan.service,
		Environment:      plan.env,
		ControlNamespace: repo.Namespace,
		Release:          plan.release.Name,
		Confine:          validation.ConfinementOf(repo),
	}
	res, err := changespec.Validate(ctx, r.timedValidator(), r.ScratchDir, "validate-", art, req, func(dir string) (*validation.Previous, error) {
		return r.previousFor(ctx, repo, cache, plan, dir), nil
	})
	if err != nil {
		return nil, err
	}
	if res.Manifest != "" {
		r.rememberManifest(types.NamespacedName{Namespace: plan.release.Namespace, Name: plan.release.Name}, plan.revision, res.Manifest)
	}
	return res, nil
}

// timedValidator is r's validator, observing each validation's duration by
// verdict ("error" for one that failed) when metrics are on; nil without a
// validator.
func (r *RepositoryReconciler) timedValidator() validation.Validator {
	if r.Validator == nil || r.Metrics == nil {
		return r.Validator
	}
	return validatorFunc(func(ctx context.Context, req validation.Request) (*validation.Result, error) {
		start := time.Now()
		res, err := r.Validator.Validate(ctx, req)
		outcome := "error"
		if err == nil {
			outcome = string(res.Verdict.Result)
		}
		r.Metrics.ValidationDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
		return res, err
	})
}

// validatorFunc is a function that is a validation.Validator.
type validatorFunc func(ctx context.Context, req validation.Request) (*validation.Result, error)

// Validate implements validation.Validator.
func (f validatorFunc) Validate(ctx context.Context, req validation.Request) (*validation.Result, error) {
	return f(ctx, req)
}

// authorsBase is the revision a change's authors are counted from: the
// applied revision when the cache has it, else the last synced commit.
func authorsBase(rel *sluicev1.Release, cache *git.Repo) string {
	if rel.Status.AppliedRevision != "" && cache.HasCommit(rel.Status.AppliedRevision) {
		return rel.Status.AppliedRevision
	}
	return rel.Status.LastSyncedCommit
}

// writePlanSecrets stores the plan file in "<cr>-plan", then "-plan-1"…,
// each at most PlanChunkSize, owned by the ChangeRequest.
func (r *RepositoryReconciler) writePlanSecrets(ctx context.Context, cr *sluicev1.ChangeRequest, plan []byte) error {
	for i := 0; i == 0 || i*sluicev1.PlanChunkSize < len(plan); i++ {
		end := min((i+1)*sluicev1.PlanChunkSize, len(plan))
		chunk := plan[i*sluicev1.PlanChunkSize : end]
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:      sluicev1.PlanSecretName(cr.Name, i),
				Namespace: cr.Namespace,
				Labels: map[string]string{
					sluicev1.LabelChangeRequest: cr.Name,
					sluicev1.LabelRelease:       cr.Spec.Release,
					sluicev1.LabelRepository:    cr.Labels[sluicev1.LabelRepository],
				},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{sluicev1.PlanSecretKey: chunk},
		}
		if err := controllerutil.SetControllerReference(cr, s, r.Scheme()); err != nil {
			return fmt.Errorf("own plan secret: %w", err)
		}
		if err := r.Create(ctx, s, client.FieldOwner(ControllerName)); err != nil {
			if !apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("create plan secret %s: %w", s.Name, err)
			}
			found := &corev1.Secret{}
			if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(s), found); err != nil {
				return fmt.Errorf("read plan secret %s: %w", s.Name, err)
			}
			if string(found.Data[sluicev1.PlanSecretKey]) != string(chunk) {
				return fmt.Errorf("plan secret %s exists with other content", s.Name)
			}
		}
	}
	return nil
}

// planSecretsComplete reports whether the plan Secrets of cr hold a plan
// file matching its planFileSHA256 (true when it has no plan).
func (r *RepositoryReconciler) planSecretsComplete(ctx context.Context, cr *sluicev1.ChangeRequest) (bool, error) {
	if cr.Spec.PlanFileSHA256 == "" {
		return true, nil
	}
	var plan []byte
	for i := 0; ; i++ {
		s := &corev1.Secret{}
		err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: cr.Namespace, Name: sluicev1.PlanSecretName(cr.Name, i)}, s)
		if apierrors.IsNotFound(err) {
			break
		}
		if err != nil {
			return false, fmt.Errorf("read plan secret: %w", err)
		}
		plan = append(plan, s.Data[sluicev1.PlanSecretKey]...)
	}
	return sluicev1.SHA256Digest(plan) == cr.Spec.PlanFileSHA256, nil
}
