package controller

import (
	"context"
	"errors"
	"fmt"
	"path"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// conflictError says a Release of the wanted name belongs to someone else.
type conflictError struct{ msg string }

func (e *conflictError) Error() string { return e.msg }

// replanRequested returns the Release's re-plan annotation value when it has
// not been handled yet: the newest ChangeRequest records the value it
// answered in the same annotation.
func replanRequested(rel *sluicev1.Release) string {
	v := rel.Annotations[sluicev1.AnnotationReplan]
	if v == "" {
		return ""
	}
	if rel.Annotations[annotationReplanHandled] == v {
		return ""
	}
	return v
}

// annotationReplanHandled on a Release records the last re-plan value the
// syncer answered with a new ChangeRequest.
const annotationReplanHandled = "gitops.sluice.dev/replan-handled"

// desiredRelease is the Release the manifest at a revision asks for, and
// the source a change of it records. Its spec is written to an existing
// Release only from a recorded change (adoptSpec).
func desiredRelease(repo *sluicev1.Repository, svc *manifest.Service, envName string) (*sluicev1.Release, *sluicev1.ChangeSource, error) {
	env, ok := svc.Environment(envName)
	if !ok {
		return nil, nil, fmt.Errorf("environment %q not in the manifest", envName)
	}
	src, err := changespec.SourceOf(svc, envName)
	if err != nil {
		return nil, nil, err
	}
	name := sluicev1.ReleaseName(svc.Name, sluicev1.EnvironmentName(env.Name))
	rel := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: repo.Namespace}}
	rel.Spec = sluicev1.ReleaseSpec{
		Repository:      repo.Name,
		Service:         src.Service,
		Environment:     src.Environment,
		SourcePath:      src.Path,
		TargetNamespace: env.Namespace,
		Chart:           src.Chart,
		Values:          src.Values,
		Terraform:       src.Terraform,
		Delivery:        sluicev1.Delivery(env.Delivery),
		Rule:            changespec.RuleOf(env.Approval),
		Owners:          svc.Owners,
	}
	return rel, src, nil
}

// ensureRelease creates the Release (a new release: no change of it is
// pending) or brings the labels and owner of an existing one in line,
// refusing one controlled by anything but this Repository. It never writes
// an existing Release's spec: that is written from the ChangeRequest once
// one records the push (adoptSpec), so a push that cannot be planned
// changes nothing.
func (p *syncPass) ensureRelease(ctx context.Context, want *sluicev1.Release, existing *sluicev1.Release) (*sluicev1.Release, error) {
	labels := map[string]string{
		sluicev1.LabelRepository:  p.repo.Name,
		sluicev1.LabelService:     want.Spec.Service,
		sluicev1.LabelEnvironment: string(want.Spec.Environment),
	}
	if existing == nil {
		// Not labelled as ours: it may still exist, owned by someone else.
		cur := &sluicev1.Release{}
		err := p.r.APIReader.Get(ctx, client.ObjectKeyFromObject(want), cur)
		switch {
		case err == nil:
			existing = cur
		case !apierrors.IsNotFound(err):
			return nil, fmt.Errorf("read release %s: %w", want.Name, err)
		}
	}
	if existing == nil {
		want.Labels = labels
		// A new Release starts in its Repository's shard; an existing one
		// is moved by reconcileShard only, when its apply lock is free.
		sluicev1.SetShard(want, sluicev1.ShardOf(p.repo))
		if err := controllerutil.SetControllerReference(p.repo, want, p.r.Scheme()); err != nil {
			return nil, fmt.Errorf("own release %s: %w", want.Name, err)
		}
		if err := p.r.Create(ctx, want, client.FieldOwner(ControllerName)); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return nil, fmt.Errorf("release %s appeared meanwhile; retrying", want.Name)
			}
			return nil, fmt.Errorf("create release %s: %w", want.Name, err)
		}
		return want, nil
	}
	if owner := metav1.GetControllerOf(existing); owner != nil && owner.UID != p.repo.UID {
		return nil, &conflictError{msg: fmt.Sprintf("Release %s is owned by %s %s, not by this Repository; it is left alone", existing.Name, owner.Kind, owner.Name)}
	} else if owner == nil && existing.Spec.Repository != p.repo.Name {
		return nil, &conflictError{msg: fmt.Sprintf("Release %s belongs to Repository %q; it is left alone", existing.Name, existing.Spec.Repository)}
	}
	patched := existing.DeepCopy()
	if patched.Labels == nil {
		patched.Labels = map[string]string{}
	}
	for k, v := range labels {
		patched.Labels[k] = v
	}
	if metav1.GetControllerOf(patched) == nil {
		if err := controllerutil.SetControllerReference(p.repo, patched, p.r.Scheme()); err != nil {
			return nil, fmt.Errorf("own release %s: %w", want.Name, err)
		}
	}
	if equality.Semantic.DeepEqual(existing.Labels, patched.Labels) && equality.Semantic.DeepEqual(existing.OwnerReferences, patched.OwnerReferences) {
		return existing, nil
	}
	if err := p.r.Patch(ctx, patched, client.MergeFrom(existing), client.FieldOwner(ControllerName)); err != nil {
		return nil, fmt.Errorf("update release %s: %w", want.Name, err)
	}
	return patched, nil
}

// syncRelease brings one release up to date with the head commit: nothing
// when its inputs hash as before (and no re-plan is asked), otherwise an
// artifact, a validation and a ChangeRequest.
func (p *syncPass) syncRelease(ctx context.Context, e *catalog.Entry, envName string, existing *sluicev1.Release) error {
	want, src, err := desiredRelease(p.repo, e.Service, envName)
	if err != nil {
		return err
	}
	// The release's own inputs decide whether it changed; the artifact
	// still carries the service's folders.
	in, ok := e.Releases[envName]
	if !ok {
		return fmt.Errorf("no inputs listed for environment %q", envName)
	}
	tree, err := in.Tree(p.cache, p.head)
	if err != nil {
		return fmt.Errorf("hash inputs: %w", err)
	}
	// A chart from a chart repository is resolved on every pass: its
	// digest is part of the inputs, so a new version in the range is a
	// change without a push.
	remote, err := p.r.remoteChart(ctx, p.repo, e.Service, envName)
	if e.Service.ChartOf(envName).Repo != "" {
		p.remote = true
	}
	if err != nil {
		return p.chartUnavailable(ctx, want.Name, existing, err)
	}
	tree = chartTree(tree, remote)
	chartSource(src, remote)
	// So are the charts of the overlay's helmCharts entries.
	kcharts, err := p.r.kustomizeCharts(ctx, p.repo, in.HelmCharts)
	if len(in.HelmCharts) > 0 {
		p.remote = true
	}
	if err != nil {
		return p.chartUnavailable(ctx, want.Name, existing, err)
	}
	tree = kustomizeChartsTree(tree, kcharts)
	recordKustomizeCharts(src, kcharts)
	// Remote bases are pinned to a commit the overlay names (an input),
	// so they change the tree only with a push; they are fetched for the
	// artifact when the release changed.
	var bases []fetchedBase
	if len(in.RemoteBases) > 0 && !(existing != nil && metav1.IsControlledBy(existing, p.repo) && existing.Status.LastSyncedTree == tree && replanRequested(existing) == "") {
		if bases, err = p.r.remoteBases(ctx, p.repo, in.RemoteBases); err != nil {
			return p.chartUnavailable(ctx, want.Name, existing, err)
		}
	}
	// The tree covers everything the release reads, its view of the
	// manifest included: the same tree is the same change.
	if existing != nil && metav1.IsControlledBy(existing, p.repo) && existing.Status.LastSyncedTree == tree && replanRequested(existing) == "" {
		p.synced(want.Name, tree)
		return nil
	}
	rel, err := p.ensureRelease(ctx, want.DeepCopy(), existing)
	if err != nil {
		return err
	}
	if rel.Status.LastSyncedTree == tree && replanRequested(rel) == "" {
		p.synced(want.Name, tree)
		return nil
	}
	plan := &changePlan{
		release:   rel,
		revision:  p.head,
		inputs:    e.Inputs,
		tree:      tree,
		service:   e.Service,
		env:       envName,
		replan:    replanRequested(rel),
		inputsErr: e.InputsErr,
		spec:      &want.Spec,
		source:    src,
		reads:     p.reads,
		chart:     remote,
		bases:     bases,
		kcharts:   kcharts,
	}
	return p.plan(ctx, plan)
}

// chartUnavailable handles a chart that could not be resolved or fetched:
// what only a human can fix (credentials, a range with no match, a chart
// over the limit or other bytes than its digest) is a problem on the
// Repository and a Synced=False condition on the Release, which waits for
// the next poll; anything else is returned for a retry. Nothing is
// proposed, the applied release is untouched, the other releases go on.
func (p *syncPass) chartUnavailable(ctx context.Context, name string, existing *sluicev1.Release, err error) error {
	var ce *chartError
	if !errors.As(err, &ce) {
		return err
	}
	msg := fmt.Sprintf("%s: %s", name, ce.msg)
	p.problem(sluicev1.ReasonChartUnavailable, msg)
	if existing != nil && metav1.IsControlledBy(existing, p.repo) {
		if serr := p.r.setSynced(ctx, existing, metav1.ConditionFalse, sluicev1.ReasonChartUnavailable, ce.msg); serr != nil {
			return serr
		}
	}
	return nil
}

// syncInvalid answers a manifest that no longer parses with a rejected
// ChangeRequest for each Release already known from the folder.
func (p *syncPass) syncInvalid(ctx context.Context, e *catalog.Entry, rel *sluicev1.Release) error {
	if metav1.GetControllerOf(rel) == nil || !metav1.IsControlledBy(rel, p.repo) {
		return &conflictError{msg: fmt.Sprintf("Release %s is not owned by this Repository; it is left alone", rel.Name)}
	}
	inputs := []string{e.Dir}
	tree, err := p.cache.InputsHash(p.head, inputs)
	if err != nil {
		return fmt.Errorf("hash inputs: %w", err)
	}
	if rel.Status.LastSyncedTree == tree && replanRequested(rel) == "" {
		p.synced(rel.Name, tree)
		return nil
	}
	plan := &changePlan{release: rel, revision: p.head, inputs: inputs, tree: tree, env: string(rel.Spec.Environment), replan: replanRequested(rel),
		spec: rel.Spec.DeepCopy(), reads: p.reads,
		invalid: manifestFindings(e.Err, path.Join(e.Dir, manifest.FileName))}
	return p.plan(ctx, plan)
}

// plan turns plan into a ChangeRequest (planChange) and records it in the
// pass: the release's synced tree and the name of a created ChangeRequest.
// A failure is said on the Release too (Synced=False) and returned for a
// retry.
func (p *syncPass) plan(ctx context.Context, plan *changePlan) error {
	rel := plan.release
	cr, err := p.r.planChange(ctx, p.repo, p.cache, plan)
	if err != nil {
		if serr := p.r.setSynced(ctx, rel, metav1.ConditionFalse, sluicev1.ReasonSyncFailed,
			fmt.Sprintf("no ChangeRequest for %s yet (retried): %s", sluicev1.ShortSHA(p.head), git.Redact(err.Error()))); serr != nil {
			log.FromContext(ctx).Error(serr, "Recording the failed sync on the Release failed", "release", rel.Name)
		}
		return err
	}
	p.synced(rel.Name, plan.tree)
	if cr != "" {
		p.createdFor(rel.Name, cr)
	}
	return nil
}

// manifestFindings turns a manifest error into deny findings.
func manifestFindings(err error, file string) []sluicev1.Finding {
	var merr *manifest.Error
	if ok := asManifestError(err, &merr); ok && len(merr.Problems) > 0 {
		out := make([]sluicev1.Finding, 0, len(merr.Problems))
		for _, pr := range merr.Problems {
			out = append(out, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "service.yaml", Message: pr.Message, File: pr.File, Line: int32(pr.Line)})
		}
		return out
	}
	return []sluicev1.Finding{{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "service.yaml", Message: err.Error(), File: file}}
}

// event records a Kubernetes Event on obj.
func (r *RepositoryReconciler) event(obj runtime.Object, eventType, reason, msg string) {
	if r.Recorder == nil {
		return
	}
	r.Recorder.Eventf(obj, nil, eventType, reason, "Sync", "%s", text.Truncate(msg, 1024))
}
