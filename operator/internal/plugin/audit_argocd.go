package plugin

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/drift"
)

// auditArgoCD holds a release delivered by Argo CD to its applied change,
// from what Argo CD reports of the release's Application (read as the
// plugin's user, who needs get on argoproj.io applications in the control
// namespace): proven when the Application is still the one the Argo CD
// applier set for the change (pinned to its commit, rendered by the Sluice
// plugin, which delivers only a manifest hashing to manifestDigest), git at
// the commit Argo CD synced says Argo CD rendered it with that plugin (its
// status says only "Plugin"; an override file in the repository can name
// another), and Argo CD reports that commit Synced and Healthy; drifted
// when Argo CD renders with another plugin, when Argo CD
// reports anything OutOfSync, compares or synced another revision, or the
// Application's spec was changed (see drift.ArgoCDChecker); unknown when
// there is no Application or Argo CD cannot say.
func (a *app) auditArgoCD(ctx context.Context, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) (string, []string) {
	var ev []string
	say := func(format string, args ...any) { ev = append(ev, fmt.Sprintf(format, args...)) }
	repo := &sluicev1.Repository{}
	if err := a.client.Get(ctx, client.ObjectKey{Namespace: rel.Namespace, Name: rel.Spec.Repository}, repo); err != nil {
		say("the Repository %s cannot be read: %v", rel.Spec.Repository, err)
		return AuditUnknown, ev
	}
	checker := &drift.ArgoCDChecker{Config: a.restConfig, Direct: true}
	st, err := checker.Inspect(ctx, rel, repo, cr)
	switch {
	case err != nil:
		say("the Argo CD Application cannot be read: %v", err)
		return AuditUnknown, ev
	case !st.Found:
		say("there is no Argo CD Application %s", st.Application)
		return AuditUnknown, ev
	}
	say("Argo CD Application %s: sync %s at revision %s, health %s, %d resources, destination %s %s, compared at %s",
		st.Application, orNone(st.SyncStatus), orNone(sluicev1.ShortSHA(st.SyncRevision)), orNone(st.Health), st.Resources,
		orNone(st.Server), orNone(st.Namespace), orNone(st.ReconciledAt))
	if st.Report.Drifted() {
		say("%s", drift.Summary(cr.Name, st.Report.Objects))
		return AuditDrifted, ev
	}
	if st.SyncStatus != "Synced" || st.SyncRevision != cr.Spec.Revision || st.Health != "Healthy" {
		if st.ComparisonError != "" {
			say("Argo CD cannot compare: %s", st.ComparisonError)
		}
		say("not proven: Argo CD does not report revision %s Synced and Healthy", sluicev1.ShortSHA(cr.Spec.Revision))
		return AuditUnknown, ev
	}
	say("rendered by the Sluice plugin at the approved commit (git there names no other plugin), which delivers only a manifest hashing to manifestDigest %s", cr.Spec.ManifestDigest)
	return AuditProven, ev
}

// proveArgoCD is auditArgoCD as a delivery prover.
func proveArgoCD(ctx context.Context, r *auditRun, rel *sluicev1.Release, cr *sluicev1.ChangeRequest) proof {
	result, evidence := r.a.auditArgoCD(ctx, rel, cr)
	return proof{Result: result, Evidence: evidence}
}
