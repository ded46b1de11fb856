package argocd

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
)

func startedAt(app *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "startedAt")
	return s
}

// syncStarted waits until Argo CD has started the sync change asked for
// (its operation state names the change) and returns when it started.
func (f *fixture) syncStarted(change string) string {
	f.t.Helper()
	var started string
	require.Eventually(f.t, func() bool {
		app := f.application()
		started = startedAt(app)
		return readStatus(app).opChange == change && started != ""
	}, patience, 100*time.Millisecond, "Argo CD never started the sync")
	return started
}

func TestArgoCD_anApprovedChangeIsAppliedWhenArgoCDReportsItSyncedAndHealthy(t *testing.T) {
	f := newFixture(t, true)
	cr := f.change("message: approved\n", nil)
	res, err := f.apply(cr)
	require.NoError(t, err, argo.Logs())
	require.Contains(t, res.Message, "synced revision "+cr.Spec.Revision[:10]+" and is Healthy")
	require.Equal(t, "approved", f.message(), "Argo CD applied the approved manifest")

	app := f.application()
	spec := app.Object["spec"].(map[string]any)
	src := spec["source"].(map[string]any)
	require.Equal(t, cr.Spec.Revision, src["targetRevision"], "pinned to the approved commit, never a branch")
	require.Equal(t, f.repo.Spec.URL, src["repoURL"])
	require.Equal(t, "services/web", src["path"])
	require.Equal(t, map[string]any{"name": PluginName}, src["plugin"], "rendered by the Sluice plugin only")
	require.Nil(t, src["helm"], "Argo CD does not render the chart itself")
	require.Equal(t, f.target, spec["destination"].(map[string]any)["namespace"])
	require.Equal(t, ProjectName(f.repo), spec["project"])
	require.Equal(t, "Plugin", app.Object["status"].(map[string]any)["sourceType"])
	owner := metav1.GetControllerOf(app)
	require.NotNil(t, owner)
	require.Equal(t, f.release.UID, owner.UID, "owned by the Release")

	// The Repository's AppProject bounds it.
	proj := &unstructured.Unstructured{}
	proj.SetGroupVersionKind(AppProjectGVK)
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: argo.Namespace, Name: ProjectName(f.repo)}, proj))
	pspec := proj.Object["spec"].(map[string]any)
	require.Equal(t, []any{map[string]any{"server": InClusterServer, "namespace": "web-*"}}, pspec["destinations"])
	require.Equal(t, []any{f.ctl}, pspec["sourceNamespaces"])
	require.Equal(t, []any{f.repo.Spec.URL}, pspec["sourceRepos"])
	require.Empty(t, pspec["clusterResourceWhitelist"], "no cluster-scoped kind")

	// A re-run (the operator restarted before recording it) asks for no
	// second sync and writes nothing.
	before := f.application()
	f.take(cr)
	_, err = f.applier.Apply(context.Background(), applier.Request{Change: cr, Repository: f.repo})
	require.NoError(t, err)
	f.finish(cr)
	after := f.application()
	require.Equal(t, startedAt(before), startedAt(after), "no second sync")
	require.Equal(t, before.GetResourceVersion(), after.GetResourceVersion(), "nothing written")

	// The next change re-pins the same Application.
	next := f.change("message: second\n", nil)
	_, err = f.apply(next)
	require.NoError(t, err, argo.Logs())
	require.Equal(t, "second", f.message())
	require.Equal(t, next.Spec.Revision, f.application().Object["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"])
}

func TestArgoCD_anApprovedChangeThatRemovesAnObjectDeletesIt(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t, true)
	_, err := f.apply(f.change("message: approved\nsecond: true\n", nil))
	require.NoError(t, err, argo.Logs())
	second := client.ObjectKey{Namespace: f.target, Name: f.release.Name + "-second"}
	require.NoError(t, env.Client.Get(ctx, second, &corev1.ConfigMap{}))
	// An object in the target namespace that Argo CD does not track.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: f.target, Name: "not-argos"}}
	require.NoError(t, env.Client.Create(ctx, other))

	// The next approved change no longer renders the second ConfigMap: it
	// is applied (without prune Argo CD would stay OutOfSync and the apply
	// would wait for ever, holding the Release's apply lock) and the
	// ConfigMap is gone.
	_, err = f.apply(f.change("message: next\n", nil))
	require.NoError(t, err, argo.Logs())
	require.Equal(t, "next", f.message())
	err = env.Client.Get(ctx, second, &corev1.ConfigMap{})
	require.True(t, apierrors.IsNotFound(err), "the removed ConfigMap is pruned: %v", err)
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(other), &corev1.ConfigMap{}), "what Argo CD does not track stays")
}

func TestArgoCD_aLaterUnapprovedPushDoesNotAlterThePendingApprovedChange(t *testing.T) {
	f := newFixture(t, true)
	approved := f.change("message: approved\n", nil)

	// Before the approved change is applied, the pusher pushes again: new
	// values, and the syncer moves the Release's spec along (a values file
	// the change never had, another chart folder).
	unapproved, _ := f.push("message: unapproved\n", nil)
	rel := f.release.DeepCopy()
	rel.Spec.Values = []sluicev1.RelativePath{"services/web/values-evil.yaml"}
	rel.Spec.Chart.Path = "charts/evil"
	require.NoError(t, env.Client.Update(context.Background(), rel))
	f.release = rel

	_, err := f.apply(approved)
	require.NoError(t, err, argo.Logs())
	require.Equal(t, "approved", f.message(), "what Argo CD applied is the approved change's manifest")
	src := f.application().Object["spec"].(map[string]any)["source"].(map[string]any)
	require.Equal(t, approved.Spec.Revision, src["targetRevision"])
	require.NotContains(t, src, "helm", "nothing of the Release's current spec reaches the Application")

	// Asked for the unapproved commit (as a sync of it would ask), the
	// plugin refuses: no approved change is at that commit.
	var out strings.Builder
	p := &CMP{Client: env.Client, Fetcher: f.applier.opts.Fetcher}
	err = p.Generate(context.Background(), []string{"ARGOCD_APP_NAME=" + f.ctl + "_" + f.release.Name, "ARGOCD_APP_REVISION=" + unapproved}, &out)
	require.ErrorContains(t, err, "no approved change of the Release")
	require.Empty(t, out.String())
}

func TestArgoCD_aRepositoryOverrideFileIsRefusedAndNothingIsApplied(t *testing.T) {
	for _, perApp := range []bool{false, true} {
		t.Run(map[bool]string{false: "for every Application", true: "for this Application"}[perApp], func(t *testing.T) {
			f := newFixture(t, true)
			// Argo CD merges .argocd-source.yaml and .argocd-source-<app>.yaml
			// (app: "<namespace>_<name>") of the source path into the source
			// before rendering: the pusher tries to hand the plugin env.
			file := ".argocd-source.yaml"
			if perApp {
				file = ".argocd-source-" + f.ctl + "_" + f.release.Name + ".yaml"
			}
			cr := f.change("message: approved\n", map[string]string{
				"services/web/" + file: "plugin:\n  env:\n    - {name: MESSAGE, value: unapproved}\n",
			})
			_, err := f.apply(cr)
			fail := appliertest.RequireFailure(t, err, sluicev1.ReasonManifestMismatch)
			require.Contains(t, fail.Message, "services/web/"+file)
			require.Empty(t, f.message(), "nothing applied")
			err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, newApplication())
			require.True(t, apierrors.IsNotFound(err), "no Application: %v", err)
		})
	}
}

func TestArgoCD_aParameterOverrideOnTheApplicationIsRefusedByThePlugin(t *testing.T) {
	f := newFixture(t, true)
	cr := f.change("message: approved\n", nil)
	_, err := f.apply(cr)
	require.NoError(t, err, argo.Logs())

	// Someone with rights on the Application adds plugin env and asks
	// Argo CD for a sync of it.
	require.NoError(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		app := f.application()
		if err := unstructured.SetNestedSlice(app.Object, []any{map[string]any{"name": "MESSAGE", "value": "overridden"}},
			"spec", "source", "plugin", "env"); err != nil {
			return err
		}
		app.Object["operation"] = map[string]any{"sync": map[string]any{"revision": cr.Spec.Revision}, "initiatedBy": map[string]any{"username": "someone"}}
		return env.Client.Update(context.Background(), app)
	}))
	var msg string
	require.Eventually(t, func() bool {
		app := f.application()
		_, pending := app.Object["operation"]
		phase, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "phase")
		msg, _, _ = unstructured.NestedString(app.Object, "status", "operationState", "message")
		user, _, _ := unstructured.NestedString(app.Object, "status", "operationState", "operation", "initiatedBy", "username")
		return !pending && user == "someone" && (phase == "Failed" || phase == "Error")
	}, 60*time.Second, 200*time.Millisecond, argo.Logs())
	require.Contains(t, msg, "the Sluice plugin takes no parameters or env")
	require.Equal(t, "approved", f.message(), "what runs is still the approved manifest")

	// Nor does the next change take the override: Sluice sets the source.
	next := f.change("message: next\n", nil)
	_, err = f.apply(next)
	require.NoError(t, err, argo.Logs())
	require.Equal(t, "next", f.message())
}

func TestArgoCD_objectsOutsideTheRepositorysNamespacesAreRefusedByArgoCD(t *testing.T) {
	ctx := context.Background()
	// Kept by an earlier run of the test in this control plane (-count).
	require.NoError(t, client.IgnoreAlreadyExists(env.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "payments"}})))
	for name, values := range map[string]string{
		"another namespace": "elsewhere: payments\n",
		"cluster-scoped":    "clusterRole: true\n",
	} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t, true)
			// The verdict found nothing (a validator miss, or a gate that
			// let it through): Argo CD's AppProject still holds.
			cr := f.change("message: approved\n"+values, nil)
			_, err := f.apply(cr)
			fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
			require.Contains(t, fail.Message, "is not permitted in project", "Argo CD's message")
			require.Contains(t, fail.Message, ProjectName(f.repo))
			err = env.Client.Get(ctx, client.ObjectKey{Namespace: "payments", Name: f.release.Name + "-planted"}, &corev1.ConfigMap{})
			require.True(t, apierrors.IsNotFound(err), "nothing in payments: %v", err)
			err = env.Client.Get(ctx, client.ObjectKey{Name: f.release.Name + "-planted"}, &rbacv1.ClusterRole{})
			require.True(t, apierrors.IsNotFound(err), "no ClusterRole: %v", err)
		})
	}
}

func TestArgoCD_aClusterKindTheRepositoryAllowsIsSynced(t *testing.T) {
	f := newFixture(t, true)
	f.repo.Spec.AllowedClusterKinds = []sluicev1.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}}
	cr := f.change("message: approved\nclusterRole: true\n", nil)
	_, err := f.apply(cr)
	require.NoError(t, err, argo.Logs())
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Name: f.release.Name + "-planted"}, &rbacv1.ClusterRole{}))
	require.NoError(t, env.Client.Delete(context.Background(), &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: f.release.Name + "-planted"}}))
}

func TestArgoCD_aFailedSyncFailsTheChangeWithArgoCDsMessage(t *testing.T) {
	f := newFixture(t, true)
	cr := f.change("message: approved\nbadObject: true\n", nil)
	_, err := f.apply(cr)
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "ended Failed")
	require.Contains(t, fail.Message, "Not_A_Valid_Name", "Argo CD's message")
}

func TestArgoCD_aManifestThatIsNotTheApprovedOneIsNeverSynced(t *testing.T) {
	f := newFixture(t, true)
	// The recorded manifestDigest is of other values than the artifact
	// holds: the plugin refuses, so Argo CD has nothing to apply.
	commit, files := f.push("message: served\n", nil)
	cr := f.changeFor(commit, files, f.digestOf(f.tree("message: approved\n", nil)))
	_, err := f.apply(cr)
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "ManifestMismatch")
	require.Empty(t, f.message(), "nothing applied")
}

// TestArgoCD_aLongSyncIsLookedAtAgainNotAskedForTwice: an Apply that
// watched a running sync for its Wait hands back Waiting; the next Apply
// watches the same sync instead of asking for another.
func TestArgoCD_aLongSyncIsLookedAtAgainNotAskedForTwice(t *testing.T) {
	f := newFixture(t, true)
	f.applier.opts.Wait = 3 * time.Second
	cr := f.change("message: approved\ndeployment: true\n", nil)
	f.take(cr)
	req := applier.Request{Change: cr, Repository: f.repo}
	// No kubelet: the Deployment stays Progressing.
	_, err := f.look(req)
	require.ErrorIs(t, err, ErrSyncing, argo.Logs())
	_, ok := applier.AsFailure(err)
	require.False(t, ok, "still syncing is retried, not a failure")
	// The look may end before Argo CD got to the sync at all (a busy
	// machine): wait until Argo CD started it, then look again.
	first := f.syncStarted(cr.Name)

	_, err = f.look(req)
	require.ErrorIs(t, err, ErrSyncing)
	require.Equal(t, first, startedAt(f.application()), "the sync is not asked for again")

	// The Deployment becomes available (as a kubelet would make it).
	dep := &appsv1.Deployment{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: f.release.Name}, dep))
	dep.Status = appsv1.DeploymentStatus{ObservedGeneration: dep.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}}}
	require.NoError(t, env.Client.Status().Update(context.Background(), dep))
	require.Eventually(t, func() bool {
		_, err := f.applier.Apply(context.Background(), req)
		return err == nil
	}, patience, 500*time.Millisecond)
	require.Equal(t, first, startedAt(f.application()))
}

func TestArgoCD_deletingTheReleasePrunesWhatArgoCDDeployed(t *testing.T) {
	f := newFixture(t, true)
	_, err := f.apply(f.change("message: approved\n", nil))
	require.NoError(t, err, argo.Logs())
	require.Equal(t, "approved", f.message())

	removal := applier.Removal{Release: applier.ReleaseOf(f.release), TargetNamespace: f.target}
	_, err = f.applier.Cleanup(context.Background(), removal, f.repo)
	require.Error(t, err, "not done while Argo CD prunes")
	require.Eventually(t, func() bool {
		_, err := f.applier.Cleanup(context.Background(), removal, f.repo)
		return err == nil
	}, 60*time.Second, 200*time.Millisecond, argo.Logs())
	err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, newApplication())
	require.True(t, apierrors.IsNotFound(err), "the Application is gone: %v", err)
	require.Empty(t, f.message(), "Argo CD pruned the ConfigMap")
}

func TestApply_refusesWhatItMayNotTouch(t *testing.T) {
	f := newFixture(t, true)

	outside := f.change("message: approved\n", nil)
	outside.Spec.TargetNamespace = "payments-prod"
	_, err := f.applier.Apply(context.Background(), applier.Request{Change: outside, Repository: f.repo})
	appliertest.RequireFailure(t, err, sluicev1.ReasonNamespaceNotAllowed)

	// An Application of the same name that the Release does not control.
	foreign := newApplication()
	foreign.SetNamespace(f.ctl)
	foreign.SetName(f.release.Name)
	foreign.Object["spec"] = map[string]any{
		"project":     "default",
		"source":      map[string]any{"repoURL": "https://git.example.com/other.git", "path": "x", "targetRevision": "main"},
		"destination": map[string]any{"server": InClusterServer, "namespace": f.target},
	}
	require.NoError(t, env.Client.Create(context.Background(), foreign))
	_, err = f.apply(f.change("message: approved\n", nil))
	appliertest.RequireFailure(t, err, sluicev1.ReasonOwnershipConflict)
	require.Equal(t, "main", f.application().Object["spec"].(map[string]any)["source"].(map[string]any)["targetRevision"], "left alone")
	_, err = f.applier.Cleanup(context.Background(), applier.Removal{Release: applier.ReleaseOf(f.release), TargetNamespace: f.target}, f.repo)
	require.NoError(t, err, "cleanup leaves a foreign Application alone")
	f.application()

	// An AppProject of the Repository's name that Sluice did not make.
	g := newFixture(t, true)
	g.repo.Name = "taken"
	proj := &unstructured.Unstructured{}
	proj.SetGroupVersionKind(AppProjectGVK)
	proj.SetNamespace(argo.Namespace)
	proj.SetName(ProjectName(g.repo))
	proj.Object["spec"] = map[string]any{"sourceRepos": []any{"*"}}
	require.NoError(t, env.Client.Create(context.Background(), proj))
	_, err = g.apply(g.change("message: approved\n", nil))
	appliertest.RequireFailure(t, err, sluicev1.ReasonOwnershipConflict)
}

func TestApply_anApplicationOutsideTheReleasesNamespaceIsNeverCreated(t *testing.T) {
	f := newFixture(t, true)
	request := func(cr *sluicev1.ChangeRequest) applier.Request {
		return applier.Request{Change: cr, Repository: f.repo}
	}

	// A verdict that found an object outside the namespace (the gate never
	// hands one over; the applier holds if it did).
	reaching := f.change("message: approved\n", nil)
	reaching.Spec.Verdict.Findings = []sluicev1.Finding{{Severity: sluicev1.SeverityDeny, Source: "helm", Policy: "helm.namespace",
		Resource: "ClusterRoleBinding/planted", Message: "ClusterRoleBinding planted is cluster-scoped"}}
	_, err := f.applier.Apply(context.Background(), request(reaching))
	appliertest.RequireFailure(t, err, sluicev1.ReasonOutsideNamespace)

	err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, newApplication())
	require.True(t, apierrors.IsNotFound(err), "no Application: %v", err)
}

func TestApply_aServiceAccountWithoutRightsFailsWithAReadableReason(t *testing.T) {
	f := newFixture(t, false)
	_, err := f.apply(f.change("message: approved\n", nil))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "system:serviceaccount:"+f.ctl+":deployer may not read the Application")
	require.Contains(t, fail.Message, "give it a Role there")
}

func TestFlags_registerWhenArgoCDsApplicationKindIsServed(t *testing.T) {
	reg := applier.Registry{}
	require.NoError(t, (&Flags{Apply: true, Wait: time.Second, ArtifactBaseURL: server.BaseURL()}).Register(reg, env.Config, logr.Discard()))
	a, ok := reg.For(sluicev1.DeliveryArgoCD)
	require.True(t, ok, "envtest serves the Application CRD")
	require.Equal(t, Name, a.Name())

	for _, off := range []Flags{{Apply: false, ArtifactBaseURL: server.BaseURL()}, {Apply: true}} {
		reg = applier.Registry{}
		require.NoError(t, off.Register(reg, env.Config, logr.Discard()))
		_, ok = reg.For(sluicev1.DeliveryArgoCD)
		require.False(t, ok, "%+v", off)
	}
}

func TestCMP_printsTheManifestOfAnApprovedChangeOnlyAndTakesNoOverrides(t *testing.T) {
	f := newFixture(t, true)
	cr := f.change("message: approved\n", nil)
	p := &CMP{Client: env.Client, Fetcher: f.applier.opts.Fetcher}
	appEnv := []string{"ARGOCD_APP_NAME=" + f.ctl + "_" + f.release.Name, "ARGOCD_APP_REVISION=" + cr.Spec.Revision, "ARGOCD_APP_PARAMETERS=null"}
	generate := func(env ...string) (string, error) {
		var out strings.Builder
		err := p.Generate(context.Background(), env, &out)
		return out.String(), err
	}

	// Not approved yet (no lock, phase Pending): nothing.
	out, err := generate(appEnv...)
	require.ErrorContains(t, err, "no approved change of the Release")
	require.Empty(t, out)

	f.take(cr)
	out, err = generate(appEnv...)
	require.NoError(t, err)
	require.Contains(t, out, "name: web-prod-config")
	require.Contains(t, out, `message: "approved"`)

	for _, extra := range []string{"ARGOCD_ENV_MESSAGE=evil", "PARAM_MESSAGE=evil", `ARGOCD_APP_PARAMETERS=[{"name":"message","string":"evil"}]`} {
		out, err = generate(append(appEnv, extra)...)
		require.ErrorContains(t, err, "the Sluice plugin takes no parameters or env", extra)
		require.Empty(t, out)
	}
	// An Application in Argo CD's own namespace is no Sluice Application.
	_, err = generate("ARGOCD_APP_NAME="+f.release.Name, "ARGOCD_APP_REVISION="+cr.Spec.Revision)
	require.ErrorContains(t, err, "not a Sluice Application")

	// Applied: later refreshes still render it.
	f.finish(cr)
	out, err = generate(appEnv...)
	require.NoError(t, err)
	require.Contains(t, out, `message: "approved"`)
}
