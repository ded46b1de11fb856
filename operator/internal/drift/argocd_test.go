package drift_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	argoapplier "github.com/sluice-gitops/sluice/operator/internal/applier/argocd"
	"github.com/sluice-gitops/sluice/operator/internal/applier/argocd/argocdtest"
	"github.com/sluice-gitops/sluice/operator/internal/drift"
	"github.com/sluice-gitops/sluice/operator/internal/plugin"
)

// TestDriftArgoCD runs one real Argo CD for its subtests (starting it
// takes a while on two cores).
func TestDriftArgoCD(t *testing.T) {
	env, server := drift.SharedEnv()
	argo := startArgoCD(t, env, server)
	t.Run("a clean release is proven and not drifted, one synced by hand to another revision is flagged", func(t *testing.T) {
		auditFlagsAHandSyncToAnotherRevision(t, argo)
	})
	t.Run("warn reports hand-edited, deleted and planted objects and changes nothing", func(t *testing.T) {
		warnReportsWhatArgoCDFindsOutOfSync(t, argo)
	})
	t.Run("revert has Argo CD sync the approved revision again without a new approval", func(t *testing.T) {
		revertSyncsTheApprovedRevisionAgain(t, argo)
	})
	t.Run("revert prunes an object planted under the Application's tracking label", func(t *testing.T) {
		revertPrunesAPlantedObject(t, argo)
	})
	t.Run("a sync Argo CD rendered with another plugin is drift and never proven", func(t *testing.T) {
		anotherPluginIsDriftNotProven(t, argo)
	})
}

// auditArgo runs `kubectl sluice audit -o json` for the fixture's
// namespace as the admin.
func auditArgo(t *testing.T, f *argoFixture) (plugin.Attestation, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := plugin.Run(context.Background(), []string{"audit", "-n", f.ctl, "-o", "json"}, &out, &errOut, f.env.Config)
	var ats []plugin.Attestation
	require.NoError(t, json.Unmarshal(out.Bytes(), &ats), out.String()+errOut.String())
	require.Len(t, ats, 1)
	return ats[0], err
}

func auditFlagsAHandSyncToAnotherRevision(t *testing.T, argo *argocdtest.ArgoCD) {
	ctx := context.Background()
	f := newArgoFixture(t, argo, sluicev1.DriftWarn)
	f.start()
	applied, _ := f.applyFirst()
	rel := f.waitDrifted(metav1.ConditionFalse, sluicev1.ReasonNoDrift)
	require.Nil(t, rel.Status.Drift)

	at, err := auditArgo(t, f)
	require.NoError(t, err, at.Evidence)
	require.Equal(t, plugin.AuditProven, at.Result, at.Evidence)
	require.Equal(t, applied.Name, at.Change)
	require.Equal(t, applied.Spec.Revision, at.Revision)
	require.Equal(t, string(applied.Spec.ManifestDigest), at.Digests.Manifest)
	require.Len(t, at.Approvers, 1)
	require.Equal(t, "k8s:alice", at.Approvers[0].Identity)
	ev := strings.Join(at.Evidence, "; ")
	require.Contains(t, ev, "Argo CD Application "+f.ctl+"/web-prod: sync Synced at revision "+sluicev1.ShortSHA(applied.Spec.Revision)+", health Healthy, 2 resources")
	require.Contains(t, ev, "rendered by the Sluice plugin at the approved commit")

	// Someone with rights on the Application points it at a commit nobody
	// approved (plain manifests, so the Sluice plugin is out of the way)
	// and syncs it: Argo CD applies it and reports it Synced and Healthy.
	unapproved := f.tree(argoValues, map[string]string{"raw/configmaps.yaml": `apiVersion: v1
kind: ConfigMap
metadata:
  name: web-prod-config
data:
  message: unapproved
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-prod-extra
data:
  owner: team-web
`})
	other := f.push(unapproved)
	app := f.application()
	require.NoError(t, unstructured.SetNestedMap(app.Object, map[string]any{"repoURL": f.repo.Spec.URL, "targetRevision": other, "path": "raw"}, "spec", "source"))
	app.Object["operation"] = map[string]any{"initiatedBy": map[string]any{"username": "mallory"}, "sync": map[string]any{"revision": other}}
	require.NoError(t, f.env.Client.Update(ctx, app))
	require.Eventually(t, func() bool {
		app := f.application()
		rev, _, _ := unstructured.NestedString(app.Object, "status", "sync", "revision")
		status, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
		health, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
		cm := f.configMap("web-prod-config")
		return rev == other && status == "Synced" && health == "Healthy" && cm != nil && cm.Data["message"] == "unapproved"
	}, 2*time.Minute, 200*time.Millisecond, "Argo CD never synced the other revision: %s", argo.Logs())

	at, err = auditArgo(t, f)
	require.Error(t, err, "not proven: a non-zero exit")
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	ev = strings.Join(at.Evidence, "; ")
	require.Contains(t, ev, "sync Synced at revision "+sluicev1.ShortSHA(other))
	require.Contains(t, ev, "spec.source.targetRevision")
	require.Contains(t, ev, "status.sync.revision: Argo CD compares revision "+sluicev1.ShortSHA(other)+", not the approved "+sluicev1.ShortSHA(applied.Spec.Revision))
	require.Contains(t, ev, "a sync by mallory put revision "+sluicev1.ShortSHA(other))

	// The drift controller reports the same.
	rel = f.waitDrifted(metav1.ConditionTrue, sluicev1.ReasonDriftDetected)
	require.Len(t, rel.Status.Drift.Objects, 1, rel.Status.Drift.Objects)
	o := rel.Status.Drift.Objects[0]
	require.Equal(t, drift.ApplicationKind, o.Kind)
	require.Equal(t, sluicev1.DriftChanged, o.Change)
	require.Contains(t, strings.Join(o.Fields, "; "), "spec.source.path: \"raw\", not the approved \"services/web\"")
	require.Contains(t, strings.Join(o.Fields, "; "), "spec.source.plugin: not the Sluice plugin alone")

	// The Application gone: nothing Argo CD reports, so unknown.
	app = f.application()
	app.SetFinalizers(nil)
	require.NoError(t, f.env.Client.Update(ctx, app))
	require.NoError(t, client.IgnoreNotFound(f.env.Client.Delete(ctx, app)))
	at, err = auditArgo(t, f)
	require.Error(t, err)
	require.Equal(t, plugin.AuditUnknown, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), "there is no Argo CD Application "+f.ctl+"/web-prod")
}

func warnReportsWhatArgoCDFindsOutOfSync(t *testing.T, argo *argocdtest.ArgoCD) {
	ctx := context.Background()
	f := newArgoFixture(t, argo, sluicev1.DriftWarn)
	f.start()
	applied, _ := f.applyFirst()
	f.waitDrifted(metav1.ConditionFalse, sluicev1.ReasonNoDrift)

	f.tamper()
	// An object planted under the Application's tracking label: Argo CD
	// counts it as the Application's, one it would prune.
	planted := f.configMap("web-prod-config").DeepCopy()
	planted.ObjectMeta = metav1.ObjectMeta{Namespace: f.target, Name: "web-prod-planted", Labels: map[string]string{"app.kubernetes.io/instance": f.ctl + "_web-prod"}}
	require.NoError(t, f.env.Client.Create(ctx, planted))

	want := []sluicev1.DriftedObject{
		{Kind: "ConfigMap", Namespace: f.target, Name: "web-prod-config", Change: sluicev1.DriftChanged},
		{Kind: "ConfigMap", Namespace: f.target, Name: "web-prod-extra", Change: sluicev1.DriftRemoved},
		{Kind: "ConfigMap", Namespace: f.target, Name: "web-prod-planted", Change: sluicev1.DriftAdded},
	}
	// Argo CD notices each edit on its own; wait until the check saw all.
	rel := &sluicev1.Release{}
	require.Eventually(t, func() bool {
		if err := f.env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel); err != nil {
			return false
		}
		return rel.Status.Drift != nil && len(rel.Status.Drift.Objects) == len(want)
	}, 2*time.Minute, 200*time.Millisecond)
	require.Equal(t, applied.Name, rel.Status.Drift.Change)
	require.Equal(t, want, rel.Status.Drift.Objects)
	c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted)
	require.Equal(t, sluicev1.ReasonDriftDetected, c.Reason, c.Message)
	require.Contains(t, c.Message, "3 object(s) differ from "+applied.Name)
	require.Empty(t, rel.Annotations[sluicev1.AnnotationReplan], "warn asks for nothing")
	require.Equal(t, 1.0, metric(t, "sluice_release_drifted", map[string]string{"namespace": f.ctl, "release": f.release.Name}))

	// warn changes nothing: the objects stay as tampered, Argo CD syncs
	// nothing by itself, and checks that find the same write nothing.
	rv := rel.ResourceVersion
	n := metric(t, "sluice_drift_checks_total", map[string]string{"result": "drifted"})
	require.Eventually(t, func() bool {
		return metric(t, "sluice_drift_checks_total", map[string]string{"result": "drifted"}) >= n+2
	}, time.Minute, 200*time.Millisecond)
	again := &sluicev1.Release{}
	require.NoError(t, f.env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), again))
	require.Equal(t, rv, again.ResourceVersion, "a check that finds the same drift writes nothing")
	require.Equal(t, "tampered", f.configMap("web-prod-config").Data["message"])
	require.Nil(t, f.configMap("web-prod-extra"))
	_, auto, _ := unstructured.NestedFieldNoCopy(f.application().Object, "spec", "syncPolicy", "automated")
	require.False(t, auto, "Argo CD's auto-sync stays off")

	at, err := auditArgo(t, f)
	require.Error(t, err)
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), "ConfigMap web-prod-extra removed")
}

func revertSyncsTheApprovedRevisionAgain(t *testing.T, argo *argocdtest.ArgoCD) {
	ctx := context.Background()
	f := newArgoFixture(t, argo, sluicev1.DriftRevert)
	f.start()
	applied, files := f.applyFirst()
	f.waitDrifted(metav1.ConditionFalse, sluicev1.ReasonNoDrift)
	// The platform team raised the floor since: the applied change's one
	// approval would no longer do for a new change.
	require.NoError(t, f.env.Client.Create(ctx, &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: f.ctl},
		Spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{sluicev1.NamespacePattern(f.target)},
			Rule: sluicev1.ApprovalRule{Required: 2, AutoApproveRisk: sluicev1.AutoApproveNone}},
	}))

	f.tamper()
	rel := f.waitDrifted(metav1.ConditionTrue, sluicev1.ReasonDriftReverting)
	require.Equal(t, drift.RevertPrefix+applied.Name, rel.Annotations[sluicev1.AnnotationReplan])

	// The syncer answers the re-plan with attempt 2 at the applied commit;
	// it renders the same, so it carries the same approvalDigest.
	revert := f.change(applied.Spec.Revision, 2, files)
	require.Equal(t, applied.Spec.ApprovalDigest, revert.Spec.ApprovalDigest)
	done, err := f.env.WaitChangePhase(ctx, client.ObjectKeyFromObject(revert), sluicev1.PhaseApplied, 3*time.Minute)
	require.NoError(t, err, argo.Logs())
	approved := meta.FindStatusCondition(done.Status.Conditions, sluicev1.ConditionApproved)
	require.Equal(t, sluicev1.ReasonReappliesApproved, approved.Reason, approved.Message)
	var approvals sluicev1.ApprovalList
	require.NoError(t, f.env.Client.List(ctx, &approvals, client.InNamespace(f.ctl)))
	require.Len(t, approvals.Items, 1, "no new approval")

	require.Equal(t, "approved", f.configMap("web-prod-config").Data["message"], "Argo CD synced the approved message back")
	require.NotNil(t, f.configMap("web-prod-extra"), "and re-created the deleted ConfigMap")
	rel = f.waitDrifted(metav1.ConditionFalse, sluicev1.ReasonNoDrift)
	require.Nil(t, rel.Status.Drift)
	_, auto, _ := unstructured.NestedFieldNoCopy(f.application().Object, "spec", "syncPolicy", "automated")
	require.False(t, auto, "the revert went through the gate, not Argo CD's self-heal")
	at, err := auditArgo(t, f)
	require.NoError(t, err, at.Evidence)
	require.Equal(t, plugin.AuditProven, at.Result, at.Evidence)
	require.Equal(t, revert.Name, at.Change)

	// ignoreDifferences added by hand hides drift from Argo CD, and a
	// re-apply would not set the spec back (Argo CD reports the approved
	// revision synced): reported, and no revert asked for.
	app := f.application()
	require.NoError(t, unstructured.SetNestedSlice(app.Object, []any{map[string]any{"kind": "ConfigMap", "jsonPointers": []any{"/data"}}}, "spec", "ignoreDifferences"))
	require.NoError(t, f.env.Client.Update(ctx, app))
	rel = f.waitDrifted(metav1.ConditionTrue, sluicev1.ReasonDriftDetected)
	c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted)
	require.Contains(t, c.Message, "spec.ignoreDifferences")
	require.Contains(t, c.Message, "not reverted: Argo CD reports the approved revision synced and healthy")
	require.Equal(t, drift.RevertPrefix+applied.Name, rel.Annotations[sluicev1.AnnotationReplan], "no new re-plan asked for")
}

func revertPrunesAPlantedObject(t *testing.T, argo *argocdtest.ArgoCD) {
	ctx := context.Background()
	f := newArgoFixture(t, argo, sluicev1.DriftRevert)
	f.start()
	applied, files := f.applyFirst()
	f.waitDrifted(metav1.ConditionFalse, sluicev1.ReasonNoDrift)

	// An object planted under the Application's tracking label: Argo CD
	// counts it as the Application's, not in the approved manifest.
	planted := f.configMap("web-prod-config").DeepCopy()
	planted.ObjectMeta = metav1.ObjectMeta{Namespace: f.target, Name: "web-prod-planted", Labels: map[string]string{"app.kubernetes.io/instance": f.ctl + "_web-prod"}}
	require.NoError(t, f.env.Client.Create(ctx, planted))
	rel := f.waitDrifted(metav1.ConditionTrue, sluicev1.ReasonDriftReverting)
	require.Equal(t, drift.RevertPrefix+applied.Name, rel.Annotations[sluicev1.AnnotationReplan])

	// The re-apply of the applied change syncs with prune: the planted
	// object goes and the change is Applied (without prune it would wait
	// for Synced forever, holding the apply lock).
	revert := f.change(applied.Spec.Revision, 2, files)
	_, err := f.env.WaitChangePhase(ctx, client.ObjectKeyFromObject(revert), sluicev1.PhaseApplied, 3*time.Minute)
	require.NoError(t, err, argo.Logs())
	require.Nil(t, f.configMap("web-prod-planted"), "Argo CD pruned the planted ConfigMap")
	require.Equal(t, "approved", f.configMap("web-prod-config").Data["message"], "the approved objects stay")
	f.waitDrifted(metav1.ConditionFalse, sluicev1.ReasonNoDrift)
}

// anotherPluginIsDriftNotProven: an applied change whose commit carries a
// .argocd-source.yaml naming the repo-server's other plugin (the Argo CD
// applier refuses such a commit; the state is written by hand, as if an
// earlier version had applied it). Argo CD's status says sourceType
// Plugin and the Application's source names Sluice's plugin; only git
// says which plugin rendered.
func anotherPluginIsDriftNotProven(t *testing.T, argo *argocdtest.ArgoCD) {
	ctx := context.Background()
	f := newArgoFixture(t, argo, sluicev1.DriftWarn)
	files := f.tree(argoValues, map[string]string{"services/web/.argocd-source.yaml": "plugin:\n  name: " + argocdtest.OtherPluginName + "\n"})
	commit := f.push(files)
	cr := f.change(commit, 1, files)
	f.recordApplied(cr)
	f.applicationAt(cr)
	require.Eventually(t, func() bool {
		app := f.application()
		rev, _, _ := unstructured.NestedString(app.Object, "status", "sync", "revision")
		status, _, _ := unstructured.NestedString(app.Object, "status", "sync", "status")
		health, _, _ := unstructured.NestedString(app.Object, "status", "health", "status")
		return rev == commit && status == "Synced" && health == "Healthy" && f.configMap("planted-by-other") != nil
	}, 2*time.Minute, 200*time.Millisecond, "Argo CD never synced through the other plugin: %s", argo.Logs())

	at, err := auditArgo(t, f)
	require.Error(t, err, "not proven: a non-zero exit")
	require.Equal(t, plugin.AuditDrifted, at.Result, at.Evidence)
	require.Contains(t, strings.Join(at.Evidence, "; "), `Argo CD did not render with the Sluice plugin`)
	require.Contains(t, strings.Join(at.Evidence, "; "), `plugin "`+argocdtest.OtherPluginName+`"`)

	rel := &sluicev1.Release{}
	require.NoError(t, f.env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel))
	rep, err := (&drift.ArgoCDChecker{Config: f.env.Config, Server: argoapplier.InClusterServer}).Check(ctx, rel, f.repo, cr)
	require.NoError(t, err)
	require.True(t, rep.Drifted())
	require.Contains(t, strings.Join(rep.Objects[0].Fields, "; "), "Argo CD did not render with the Sluice plugin")
}
