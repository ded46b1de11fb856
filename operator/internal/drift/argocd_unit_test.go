package drift

import (
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	argoapplier "github.com/sluice-gitops/sluice/operator/internal/applier/argocd"
)

const (
	approvedRev = "1111111111111111111111111111111111111111"
	otherRev    = "2222222222222222222222222222222222222222"
)

// sluiceApp is an Application as the Argo CD applier sets it for the
// applied change, as Argo CD reports it once that change is delivered.
func sluiceApp() (*unstructured.Unstructured, *sluicev1.Release, *sluicev1.Repository, *sluicev1.ChangeRequest) {
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: "ctl", Name: "infra"}, Spec: sluicev1.RepositorySpec{URL: "https://git.example.com/infra.git"}}
	// A later push moved the Release's folder: the applied change's counts.
	rel := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: "ctl", Name: "web-prod"}, Spec: sluicev1.ReleaseSpec{SourcePath: "services/moved"}}
	cr := &sluicev1.ChangeRequest{Spec: sluicev1.ChangeRequestSpec{Revision: approvedRev, TargetNamespace: "web-prod",
		Source: &sluicev1.ChangeSource{Service: "web", Environment: "prod", Path: "services/web"}}}
	src := map[string]any{"repoURL": repo.Spec.URL, "targetRevision": approvedRev, "path": "services/web", "plugin": map[string]any{"name": argoapplier.PluginName}}
	app := &unstructured.Unstructured{Object: map[string]any{
		"spec": map[string]any{
			"project":     argoapplier.ProjectName(repo),
			"source":      src,
			"destination": map[string]any{"server": argoapplier.InClusterServer, "namespace": "web-prod"},
		},
		"status": map[string]any{
			"sync":   map[string]any{"status": "Synced", "revision": approvedRev},
			"health": map[string]any{"status": "Healthy"},
			"operationState": map[string]any{
				"phase":      "Succeeded",
				"operation":  map[string]any{"initiatedBy": map[string]any{"username": "sluice:ctl/web-prod-1111111111-r1"}, "sync": map[string]any{"revision": approvedRev}},
				"syncResult": map[string]any{"revision": approvedRev, "source": src},
			},
			"resources": []any{
				map[string]any{"kind": "ConfigMap", "namespace": "web-prod", "name": "web-prod-config", "status": "Synced"},
			},
		},
	}}
	return app, rel, repo, cr
}

func TestArgoCDSpecDrift_onlyEditsOfWhatTheApplierSetsAreDrift(t *testing.T) {
	c := &ArgoCDChecker{Server: argoapplier.InClusterServer}
	for _, tc := range []struct {
		name  string
		edit  func(app map[string]any)
		field string
	}{
		{"the Application as the applier set it", func(map[string]any) {}, ""},
		{"another folder", func(a map[string]any) {
			a["spec"].(map[string]any)["source"].(map[string]any)["path"] = "services/moved"
		}, "spec.source.path"},
		{"pinned to another commit", func(a map[string]any) {
			a["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"] = otherRev
		}, "spec.source.targetRevision"},
		{"rendered by Argo CD instead of the Sluice plugin", func(a map[string]any) {
			src := a["spec"].(map[string]any)["source"].(map[string]any)
			delete(src, "plugin")
			src["helm"] = map[string]any{"valueFiles": []any{"values.yaml"}}
		}, "spec.source.helm"},
		{"plugin parameters set", func(a map[string]any) {
			a["spec"].(map[string]any)["source"].(map[string]any)["plugin"].(map[string]any)["parameters"] = []any{map[string]any{"name": "x"}}
		}, "spec.source.plugin"},
		{"another destination namespace", func(a map[string]any) {
			a["spec"].(map[string]any)["destination"].(map[string]any)["namespace"] = "kube-system"
		}, "spec.destination.namespace"},
		{"another cluster", func(a map[string]any) {
			a["spec"].(map[string]any)["destination"].(map[string]any)["server"] = "https://elsewhere.example.com"
		}, "spec.destination.server"},
		{"another project", func(a map[string]any) { a["spec"].(map[string]any)["project"] = "default" }, "spec.project"},
		{"ignoreDifferences that would hide drift", func(a map[string]any) {
			a["spec"].(map[string]any)["ignoreDifferences"] = []any{map[string]any{"kind": "ConfigMap", "jsonPointers": []any{"/data"}}}
		}, "spec.ignoreDifferences"},
		{"Argo CD's auto-sync turned on", func(a map[string]any) {
			a["spec"].(map[string]any)["syncPolicy"] = map[string]any{"automated": map[string]any{"selfHeal": true}}
		}, "spec.syncPolicy.automated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app, _, repo, cr := sluiceApp()
			tc.edit(app.Object)
			fields := c.specDrift(app, repo, cr)
			if tc.field == "" {
				require.Empty(t, fields)
				return
			}
			require.NotEmpty(t, fields)
			require.Contains(t, fields[len(fields)-1], tc.field)
		})
	}
}

func TestArgoCDStatusDrift_anotherRevisionComparedOrSyncedIsDriftARefusedSyncIsNot(t *testing.T) {
	app, _, _, _ := sluiceApp()
	var st ArgoCDState
	readArgoStatus(app, &st)
	require.Empty(t, statusDrift(app, &st, approvedRev), "the applied change as Argo CD delivered it")

	// A sync of another revision the Sluice plugin refused changed nothing.
	op := app.Object["status"].(map[string]any)["operationState"].(map[string]any)
	op["phase"] = "Failed"
	op["operation"].(map[string]any)["sync"] = map[string]any{"revision": otherRev}
	op["syncResult"] = map[string]any{"revision": otherRev}
	require.Empty(t, statusDrift(app, &st, approvedRev))

	// One that succeeded put that revision's objects in place.
	op["phase"] = "Succeeded"
	fields := statusDrift(app, &st, approvedRev)
	require.Len(t, fields, 1)
	require.Contains(t, fields[0], "a sync by sluice:ctl/web-prod-1111111111-r1 put revision 2222222222")

	// A rollback: the approved revision, another source.
	app, _, _, _ = sluiceApp()
	op = app.Object["status"].(map[string]any)["operationState"].(map[string]any)
	op["operation"].(map[string]any)["sync"] = map[string]any{"revision": approvedRev, "source": map[string]any{"repoURL": "https://git.example.com/infra.git", "path": "raw", "targetRevision": approvedRev}}
	readArgoStatus(app, &st)
	require.Equal(t, []string{"status.operationState: the last sync overrode the Application's source"}, statusDrift(app, &st, approvedRev))

	// Argo CD compares another revision.
	app, _, _, _ = sluiceApp()
	app.Object["status"].(map[string]any)["sync"].(map[string]any)["revision"] = otherRev
	readArgoStatus(app, &st)
	require.Contains(t, statusDrift(app, &st, approvedRev)[0], "status.sync.revision: Argo CD compares revision 2222222222, not the approved 1111111111")
}

func TestArgoCDOutOfSyncResources_missingIsRemovedPrunableIsAddedTheRestChanged(t *testing.T) {
	app, _, _, _ := sluiceApp()
	app.Object["status"].(map[string]any)["resources"] = []any{
		map[string]any{"kind": "Service", "namespace": "web-prod", "name": "web", "status": "OutOfSync", "health": map[string]any{"status": "Healthy"}},
		map[string]any{"kind": "ConfigMap", "namespace": "web-prod", "name": "b-gone", "status": "OutOfSync", "health": map[string]any{"status": "Missing"}},
		map[string]any{"kind": "ConfigMap", "namespace": "web-prod", "name": "c-planted", "status": "OutOfSync", "requiresPruning": true},
		map[string]any{"kind": "ConfigMap", "namespace": "web-prod", "name": "a-same", "status": "Synced"},
		map[string]any{"kind": "ConfigMap", "namespace": "web-prod", "name": "d-hook", "status": ""},
	}
	require.Equal(t, []sluicev1.DriftedObject{
		{Kind: "ConfigMap", Namespace: "web-prod", Name: "b-gone", Change: sluicev1.DriftRemoved},
		{Kind: "ConfigMap", Namespace: "web-prod", Name: "c-planted", Change: sluicev1.DriftAdded},
		{Kind: "Service", Namespace: "web-prod", Name: "web", Change: sluicev1.DriftChanged},
	}, outOfSyncResources(app))
}

func TestArgoCDResyncs_aReapplySyncsOnlyWhatArgoCDDoesNotReportDone(t *testing.T) {
	app, _, _, _ := sluiceApp()
	require.False(t, resyncs(app, approvedRev), "synced, succeeded and healthy at the approved revision: the applier repeats nothing")
	app.Object["status"].(map[string]any)["sync"].(map[string]any)["status"] = "OutOfSync"
	require.True(t, resyncs(app, approvedRev))
	app, _, _, _ = sluiceApp()
	app.Object["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"] = otherRev
	require.True(t, resyncs(app, approvedRev), "not pinned to the approved revision: the applier re-pins it")
}

func TestArgoCDNoRevert_noRevertWhereAReapplyWouldNotUndoTheDrift(t *testing.T) {
	app, _, _, _ := sluiceApp()
	changed := sluicev1.DriftedObject{Kind: "ConfigMap", Namespace: "web-prod", Name: "web-prod-config", Change: sluicev1.DriftChanged}
	require.Empty(t, noRevert(app, nil, approvedRev), "nothing drifted")

	app.Object["status"].(map[string]any)["sync"].(map[string]any)["status"] = "OutOfSync"
	require.Empty(t, noRevert(app, []sluicev1.DriftedObject{changed}, approvedRev), "the re-apply syncs the approved revision again")
	planted := sluicev1.DriftedObject{Kind: "ConfigMap", Namespace: "web-prod", Name: "planted", Change: sluicev1.DriftAdded}
	require.Empty(t, noRevert(app, []sluicev1.DriftedObject{changed, planted}, approvedRev), "the re-apply's sync prunes the planted object")

	app, _, _, _ = sluiceApp()
	spec := sluicev1.DriftedObject{Kind: ApplicationKind, Namespace: "ctl", Name: "web-prod", Change: sluicev1.DriftChanged, Fields: []string{"spec.ignoreDifferences: set"}}
	require.Contains(t, noRevert(app, []sluicev1.DriftedObject{spec}, approvedRev), "a re-apply would not sync again")
}
