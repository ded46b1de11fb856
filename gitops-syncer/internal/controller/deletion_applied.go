package controller

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// appliedState is what was applied of a release, which a Delete change
// removes: read from the Release's applied status and the applied
// ChangeRequest, never from the Release's spec.
type appliedState struct {
	// revision is the applied revision (the last synced one when nothing
	// was applied): the artifact and the destroy plan are made from it.
	revision  string
	namespace string
	// delivery is "" when no record says it.
	delivery sluicev1.Delivery
	source   *sluicev1.ChangeSource
	rule     *sluicev1.ApprovalRule
	// notes say what no record held and where it came from instead; each
	// becomes a finding of the Delete change.
	notes []string
}

// appliedOf reads what was applied of rel: the namespace from its status
// (appliedTargetNamespace), the source, delivery and rule from the applied
// ChangeRequest (status.appliedChange). When that ChangeRequest is gone
// (retention), the status is used and a note says so; when nothing was
// applied, the newest recorded change says what a removal is judged by.
// Whatever no record holds is taken from the manifest at the applied
// revision by completeFrom, never from the Release's current spec.
func (r *RepositoryReconciler) appliedOf(ctx context.Context, rel *sluicev1.Release) (*appliedState, error) {
	st := rel.Status
	was := &appliedState{revision: st.AppliedRevision, namespace: st.AppliedTargetNamespace, rule: st.AppliedRule.DeepCopy()}
	name := st.AppliedChange
	if name == "" {
		was.revision = st.LastSyncedCommit
		name = st.LatestChange
		was.notes = append(was.notes, "the release was never applied: nothing of it should be running; the removal is judged by its newest recorded change")
	}
	cr, err := r.recordedChange(ctx, rel, name)
	if err != nil {
		return nil, err
	}
	switch {
	case cr != nil:
		if was.namespace == "" {
			was.namespace = cr.Spec.TargetNamespace
		}
		was.delivery, was.source = cr.Spec.Delivery, cr.Spec.Source.DeepCopy()
		if was.rule == nil {
			was.rule = cr.Spec.Rule.DeepCopy()
		}
	case st.AppliedChange != "":
		was.notes = append(was.notes, fmt.Sprintf("the applied ChangeRequest %s is gone (retention): the namespace comes from the Release's applied status, the rest from the manifest at the applied revision", name))
	}
	return was, nil
}

// recordedChange reads the ChangeRequest name of rel; nil when there is
// none, it is gone, or it is not an Apply change of rel.
func (r *RepositoryReconciler) recordedChange(ctx context.Context, rel *sluicev1.Release, name string) (*sluicev1.ChangeRequest, error) {
	if name == "" {
		return nil, nil
	}
	cr := &sluicev1.ChangeRequest{}
	if err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: rel.Namespace, Name: name}, cr); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, fmt.Errorf("read change %s of release %s: %w", name, rel.Name, err)
	}
	if cr.Spec.Release != rel.Name || cr.IsDelete() {
		return nil, nil
	}
	return cr, nil
}

// appliedEntry finds release relName among the services at the applied
// revision: in the recorded source's folder when there is one.
func appliedEntry(entries []catalog.Entry, relName string, src *sluicev1.ChangeSource) (*catalog.Entry, string) {
	for i := range entries {
		e := &entries[i]
		if e.Err != nil || e.Service == nil || (src != nil && e.Dir != string(src.Path)) {
			continue
		}
		for _, env := range e.Service.Environments {
			if sluicev1.ReleaseName(e.Service.Name, sluicev1.EnvironmentName(env.Name)) == relName {
				return e, env.Name
			}
		}
	}
	return nil, ""
}

// completeFrom fills what no record of the applied change held from the
// manifest at the applied revision (entry, envName), noting each.
func (was *appliedState) completeFrom(entry *catalog.Entry, envName string) error {
	env, ok := entry.Service.Environment(envName)
	if !ok {
		return fmt.Errorf("environment %q not in the manifest at %s", envName, sluicev1.ShortSHA(was.revision))
	}
	at := sluicev1.ShortSHA(was.revision)
	if was.source == nil {
		src, err := changespec.SourceOf(entry.Service, envName)
		if err != nil {
			return err
		}
		was.source = src
		was.notes = append(was.notes, fmt.Sprintf("no record holds the applied folder, chart and stack: taken from the manifest at %s", at))
	}
	if was.namespace == "" {
		was.namespace = env.Namespace
		was.notes = append(was.notes, fmt.Sprintf("no record holds the applied target namespace: %q from the manifest at %s", env.Namespace, at))
	}
	if was.delivery == "" {
		was.delivery = sluicev1.Delivery(env.Delivery).OrDefault()
		was.notes = append(was.notes, fmt.Sprintf("no record holds the applied delivery: %s from the manifest at %s", was.delivery, at))
	}
	if was.rule == nil {
		rule := changespec.RuleOf(env.Approval)
		was.rule = &rule
	}
	return nil
}
