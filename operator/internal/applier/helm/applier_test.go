package helm

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/require"
	"helm.sh/helm/v3/pkg/release"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
)

func TestMain(m *testing.M) {
	// The Terraform applier's runs re-execute this test binary as the
	// sandboxed runner child.
	runner.MaybeRunChild()
	if file := os.Getenv(childEnv); file != "" {
		os.Exit(runChildOperator(file))
	}
	testenv.Main(m, testenv.Options{}, func(e *testenv.Env) error {
		env, server = e, artifacttest.NewServer()
		e.Cleanup(server.Close)
		return nil
	})
}

func TestApply_anApprovedChangeInstallsItsObjectsAsTheServiceAccount(t *testing.T) {
	f := newFixture(t)
	cr := f.change("message: hello from staging\n", changeOpts{})

	res, err := f.apply(cr)
	require.NoError(t, err)
	require.Equal(t, int32(1), res.HelmRevision)
	require.Contains(t, res.Message, "revision 1")

	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "hello from staging", cm.Data["message"], "the environment's values won")
	var dep appsv1.Deployment
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: f.release.Name}, &dep))
	var svc corev1.Service
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: f.release.Name}, &svc))

	h := f.helmHistory()
	require.Len(t, h, 1)
	require.Equal(t, release.StatusDeployed, h[0].Info.Status)
	require.Equal(t, f.target, h[0].Namespace, "Helm's storage stays in the target namespace")
	require.Equal(t, approvalLabel(cr.Spec.ApprovalDigest), h[0].Labels[LabelApproval])
	var secrets corev1.SecretList
	require.NoError(t, env.Client.List(context.Background(), &secrets, client.InNamespace(f.ctl),
		client.MatchingLabelsSelector{Selector: labels.SelectorFromSet(labels.Set{"owner": "helm"})}))
	require.Empty(t, secrets.Items, "nothing of Helm in the control namespace")

	// The same change again, as after a restart: no second revision.
	res, err = f.apply(cr)
	require.NoError(t, err)
	require.Equal(t, int32(1), res.HelmRevision)
	require.Contains(t, res.Message, "already deployed")
	require.Len(t, f.helmHistory(), 1)
}

func TestApply_anUpgradeWithNewValuesIsRevisionTwo(t *testing.T) {
	f := newFixture(t)
	_, err := f.apply(f.change("message: one\n", changeOpts{}))
	require.NoError(t, err)

	res, err := f.apply(f.change("message: two\nreplicas: 3\n", changeOpts{}))
	require.NoError(t, err)
	require.Equal(t, int32(2), res.HelmRevision)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "two", cm.Data["message"])
	var dep appsv1.Deployment
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.target, Name: f.release.Name}, &dep))
	require.Equal(t, int32(3), *dep.Spec.Replicas)

	h := f.helmHistory()
	require.Len(t, h, 2)
	require.Equal(t, release.StatusSuperseded, h[0].Info.Status)
	require.Equal(t, release.StatusDeployed, h[1].Info.Status)
}

func TestApply_anArtifactWithOtherContentThanItsDigestsFailsBeforeAnythingIsInstalled(t *testing.T) {
	f := newFixture(t)
	other := f.change("message: not what was approved\n", changeOpts{})
	otherBytes := server.Get(other.Spec.Artifact.URL)
	cr := f.change("message: approved\n", changeOpts{serve: otherBytes})

	_, err := f.apply(cr)
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonDigestMismatch)
	require.Contains(t, fail.Message, "sha256")
	f.requireNothingInstalled()
}

func TestApply_aChartUsingLookupIsRefusedAndInstallsNothing(t *testing.T) {
	f := newFixture(t)
	// The validator renders offline, where lookup finds nothing; the live
	// cluster has the probe, so what Helm would install differs.
	require.NoError(t, env.Client.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: f.target}, Data: map[string]string{"value": "live"},
	}))
	cr := f.change("useLookup: true\n", changeOpts{})

	_, err := f.apply(cr)
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonManifestMismatch)
	require.Contains(t, fail.Error(), string(cr.Spec.ManifestDigest))
	f.requireNothingInstalled()
}

func TestApply_aTamperedArtifactWithMatchingNameAndDigestsIsRefusedByTheManifestDigest(t *testing.T) {
	f := newFixture(t)
	// The artifact at the approved name carries other values, and its
	// archive and content digests were recomputed to match; only the
	// manifests tell.
	approved := "message: approved\n"
	cr := f.change("message: tampered\n", changeOpts{approvedValues: &approved})

	_, err := f.apply(cr)
	appliertest.RequireFailure(t, err, sluicev1.ReasonManifestMismatch)
	f.requireNothingInstalled()
}

func TestApply_aRefusedChartWithCRDsInstallsNoCRD(t *testing.T) {
	f := newFixture(t)
	f.chart = "withcrd"
	f.release.Spec.Chart.Path = "charts/withcrd"
	f.repo.Spec.AllowedClusterKinds = []sluicev1.GroupKind{{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}}
	// The ServiceAccount may install CRDs, so only the order of the steps
	// keeps this one out.
	ctx := context.Background()
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: f.ctl + "-crds"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"*"}}},
	}))
	require.NoError(t, env.Client.Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: f.ctl + "-crds"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: f.ctl + "-crds"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "deployer", Namespace: f.ctl}},
	}))
	require.NoError(t, env.WaitAllowed(ctx, authorizationv1.SubjectAccessReviewSpec{
		User:               f.deployer(),
		ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"},
	}))
	require.NoError(t, env.Client.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: f.target},
	}))
	_, err := f.apply(f.change("useLookup: true\n", changeOpts{}))
	appliertest.RequireFailure(t, err, sluicev1.ReasonManifestMismatch)
	var crd apiextensionsv1.CustomResourceDefinition
	err = env.Client.Get(context.Background(), client.ObjectKey{Name: "widgets.test.sluice.dev"}, &crd)
	require.True(t, apierrors.IsNotFound(err), "the CRD was not installed: %v", err)
	require.Empty(t, f.helmHistory())
}

func TestApply_aServiceAccountWithoutRightsFailsWithAReadableReason(t *testing.T) {
	f := newFixture(t, withoutRBAC())
	_, err := f.apply(f.change("message: hi\n", changeOpts{}))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "system:serviceaccount:"+f.ctl+":deployer may not do this in namespace "+f.target)
	require.Contains(t, fail.Message, "give it a Role there")
	f.requireNothingInstalled()
}

func TestApply_aTargetNamespaceOutsideTheRepositorysListFails(t *testing.T) {
	f := newFixture(t)
	f.repo.Spec.TargetNamespaces = []string{"payments-*"}
	_, err := f.apply(f.change("message: hi\n", changeOpts{}))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonNamespaceNotAllowed)
	require.Contains(t, fail.Message, f.target)
	f.requireNothingInstalled()
}

func TestApply_aFailedFirstInstallLeavesNothing(t *testing.T) {
	f := newFixture(t)
	_, err := f.apply(f.change("badObject: true\n", changeOpts{}))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Error(), "Not_A_Valid_Name")
	f.requireNothingInstalled()
}

func TestApply_aFailedUpgradeRollsBackToThePreviousRevision(t *testing.T) {
	f := newFixture(t)
	_, err := f.apply(f.change("message: good\n", changeOpts{}))
	require.NoError(t, err)

	_, err = f.apply(f.change("message: broken\nbadObject: true\n", changeOpts{}))
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
	require.Contains(t, fail.Message, "rolled back to revision 1")

	h := f.helmHistory()
	require.Len(t, h, 3)
	require.Equal(t, release.StatusFailed, h[1].Info.Status)
	require.Equal(t, release.StatusDeployed, h[2].Info.Status)
	require.Equal(t, "Rollback to 1", h[2].Info.Description)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "good", cm.Data["message"], "the objects are back at revision 1")
}

func TestApply_aPendingInstallLeftByACrashIsRecovered(t *testing.T) {
	f := newFixture(t)
	cr := f.change("message: after the crash\n", changeOpts{})
	// What a killed operator leaves: the pending-install record, and one of
	// the chart's objects created before the kill.
	rel := &release.Release{
		Name: f.release.Name, Namespace: f.target, Version: 1,
		Info:     &release.Info{Status: release.StatusPendingInstall, Description: "Initial install underway"},
		Chart:    nil,
		Manifest: fmt.Sprintf("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s-config\n  namespace: %s\n", f.release.Name, f.target),
	}
	require.NoError(t, f.adminStore().Create(rel))
	require.NoError(t, env.Client.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: f.release.Name + "-config", Namespace: f.target,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meta.helm.sh/release-name": f.release.Name, "meta.helm.sh/release-namespace": f.target}},
		Data: map[string]string{"message": "half-done"},
	}))

	res, err := f.apply(cr)
	require.NoError(t, err)
	h := f.helmHistory()
	require.Len(t, h, 1, "the interrupted install was removed and installed afresh")
	require.Equal(t, release.StatusDeployed, h[0].Info.Status)
	require.Equal(t, int32(h[0].Version), res.HelmRevision)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "after the crash", cm.Data["message"])
}

func TestApply_aPendingUpgradeLeftByACrashIsCompleted(t *testing.T) {
	f := newFixture(t)
	first, err := f.apply(f.change("message: one\n", changeOpts{}))
	require.NoError(t, err)
	deployed := f.helmHistory()[0]
	pending := *deployed
	pending.Info = &release.Info{Status: release.StatusPendingUpgrade, Description: "Preparing upgrade"}
	pending.Version = 2
	require.NoError(t, f.adminStore().Create(&pending))

	res, err := f.apply(f.change("message: two\n", changeOpts{}))
	require.NoError(t, err)
	require.Equal(t, int32(3), res.HelmRevision)
	h := f.helmHistory()
	require.Len(t, h, 3)
	require.Equal(t, int32(1), first.HelmRevision)
	require.Equal(t, release.StatusSuperseded, h[0].Info.Status)
	require.Equal(t, release.StatusFailed, h[1].Info.Status, "the interrupted revision is marked failed, never left pending")
	require.Equal(t, release.StatusDeployed, h[2].Info.Status)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "two", cm.Data["message"])
}

func TestCleanup_uninstallsAsTheServiceAccount(t *testing.T) {
	f := newFixture(t)
	_, err := f.apply(f.change("message: bye\n", changeOpts{}))
	require.NoError(t, err)

	res, err := f.applier.Cleanup(context.Background(), f.removal(nil), f.repo)
	require.NoError(t, err)
	require.Equal(t, "Helm release web-staging uninstalled from namespace "+f.target, res.Message)
	f.requireNothingInstalled()
	res, err = f.applier.Cleanup(context.Background(), f.removal(nil), f.repo)
	require.NoError(t, err, "nothing left is no error")
	require.Contains(t, res.Message, "nothing to uninstall")

	other := newFixture(t, withoutRBAC())
	other.release = f.release.DeepCopy()
	_, err = other.applier.Cleanup(context.Background(), other.removal(nil), other.repo)
	appliertest.RequireFailure(t, err, sluicev1.ReasonApplyFailed)
}

func TestCleanup_leavesTheReleaseInPlaceWhenItMayNotActForTheRepository(t *testing.T) {
	f := newFixture(t)
	_, err := f.apply(f.change("message: stays\n", changeOpts{}))
	require.NoError(t, err)

	res, err := f.applier.Cleanup(context.Background(), f.removal(nil), nil)
	require.NoError(t, err, "with the Repository gone there is no ServiceAccount to act as; the Release may go")
	require.Contains(t, res.Message, "left in place")
	outside := f.repo.DeepCopy()
	outside.Spec.TargetNamespaces = []string{"payments-*"}
	res, err = f.applier.Cleanup(context.Background(), f.removal(nil), outside)
	require.NoError(t, err, "a namespace the Repository no longer allows is not touched")
	require.Contains(t, res.Message, "left in place")

	// An approved Delete change that cannot remove the workload fails and
	// says so, rather than claiming it removed it.
	_, err = f.applier.Cleanup(context.Background(), f.removal(&sluicev1.ChangeRequest{}), outside)
	appliertest.RequireFailure(t, err, sluicev1.ReasonOutsideNamespace)

	require.Len(t, f.helmHistory(), 1, "the Helm release is left in place")
	_, err = f.configMap()
	require.NoError(t, err)
}
