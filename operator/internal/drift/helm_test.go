package drift

import (
	"context"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/drift/drifttest"
)

func startWithDrift(f *drifttest.Fixture) {
	f.Start(func(mgr ctrl.Manager) error { return Setup(mgr, Options{Config: env.Config, SkipNameValidation: true}) })
}

// tamper does what a person with kubectl would (edit the Deployment's
// image, delete the ConfigMap) after the HPA scaled the Deployment to 3.
func tamper(f *drifttest.Fixture) {
	f.ScaleAsHPA(3)
	f.EditImage()
	f.DeleteConfigMap()
}

// metric is the value of a sluice_* series in the operator's registry.
func metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	require.NoError(t, err)
	for _, fam := range families {
		if fam.GetName() != name {
			continue
		}
	next:
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue next
				}
			}
			if m.GetCounter() != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func checks(t *testing.T, result string) float64 {
	return metric(t, "sluice_drift_checks_total", map[string]string{"result": result})
}

func TestDrift_warnReportsAnEditedFieldAndADeletedObjectButNotHPAReplicas(t *testing.T) {
	f := drifttest.New(t, env, server, sluicev1.DriftWarn)
	startWithDrift(f)
	applied := f.ApplyFirst()
	f.WaitDrifted(metav1.ConditionFalse)

	tamper(f)
	rel := f.WaitDrifted(metav1.ConditionTrue)
	c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted)
	require.Equal(t, sluicev1.ReasonDriftDetected, c.Reason, c.Message)
	require.NotNil(t, rel.Status.Drift)
	require.Equal(t, applied.Name, rel.Status.Drift.Change)
	require.ElementsMatch(t, []sluicev1.DriftedObject{
		{Kind: "Deployment", Namespace: f.Target, Name: f.Release.Name, Change: sluicev1.DriftChanged,
			Fields: []string{"spec.template.spec.containers[name=web].image"}},
		{Kind: "ConfigMap", Namespace: f.Target, Name: f.Release.Name + "-config", Change: sluicev1.DriftRemoved},
	}, rel.Status.Drift.Objects, "the image and the ConfigMap drifted; the HPA's replicas did not")
	require.Empty(t, rel.Annotations[sluicev1.AnnotationReplan], "warn asks for nothing")

	// warn changes nothing: the workload stays as tampered, and further
	// checks that find the same write nothing.
	require.Equal(t, drifttest.TamperedImage, f.Deployment().Spec.Template.Spec.Containers[0].Image)
	require.Equal(t, int32(3), *f.Deployment().Spec.Replicas)
	rv := rel.ResourceVersion
	n := checks(t, "drifted")
	require.Eventually(t, func() bool { return checks(t, "drifted") >= n+1 }, time.Minute, 200*time.Millisecond)
	again := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.Release), again))
	require.Equal(t, rv, again.ResourceVersion, "a check that finds the same drift writes nothing")
	require.Equal(t, 1.0, metric(t, "sluice_release_drifted", map[string]string{"namespace": f.Ctl, "release": f.Release.Name}))
}

func TestDrift_revertReappliesTheAppliedRevisionWithoutANewApproval(t *testing.T) {
	f := drifttest.New(t, env, server, sluicev1.DriftRevert)
	startWithDrift(f)
	applied := f.ApplyFirst()
	f.WaitDrifted(metav1.ConditionFalse)
	// The platform team raised the floor since: the applied change's one
	// approval would no longer do for a new change.
	require.NoError(t, env.Client.Create(context.Background(), &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "two", Namespace: f.Ctl},
		Spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{sluicev1.NamespacePattern(f.Target)},
			Rule: sluicev1.ApprovalRule{Required: 2, AutoApproveRisk: sluicev1.AutoApproveNone}},
	}))

	tamper(f)
	rel := f.WaitDrifted(metav1.ConditionTrue)
	c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionDrifted)
	require.Equal(t, sluicev1.ReasonDriftReverting, c.Reason, c.Message)
	require.Equal(t, RevertPrefix+applied.Name, rel.Annotations[sluicev1.AnnotationReplan])

	// The syncer answers the re-plan with attempt 2 at the applied commit;
	// it renders the same, so it carries the same approvalDigest.
	revert := f.Change(applied.Spec.Revision, 2, drifttest.Values)
	require.Equal(t, applied.Spec.ApprovalDigest, revert.Spec.ApprovalDigest)
	done, err := env.WaitChangePhase(context.Background(), client.ObjectKeyFromObject(revert), sluicev1.PhaseApplied, 2*time.Minute)
	require.NoError(t, err)
	approved := meta.FindStatusCondition(done.Status.Conditions, sluicev1.ConditionApproved)
	require.Equal(t, sluicev1.ReasonReappliesApproved, approved.Reason, approved.Message)
	var approvals sluicev1.ApprovalList
	require.NoError(t, env.Client.List(context.Background(), &approvals, client.InNamespace(f.Ctl)))
	require.Len(t, approvals.Items, 1, "no new approval")

	dep := f.Deployment()
	require.Equal(t, "registry.example.com/web:1.0.0", dep.Spec.Template.Spec.Containers[0].Image, "the image is restored")
	cm := &corev1.ConfigMap{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.Target, Name: f.Release.Name + "-config"}, cm), "the ConfigMap is back")
	rel = f.WaitDrifted(metav1.ConditionFalse)
	require.Nil(t, rel.Status.Drift)
}

// AppliedObjects reads, as the Repository's ServiceAccount, the live copy
// of exactly the objects the applied change's Helm record holds, and
// names the one deleted since (what a verification's health judges).
func TestAppliedObjects_areTheObjectsOfTheChangesHelmRecord(t *testing.T) {
	f := drifttest.New(t, env, server, sluicev1.DriftWarn)
	startWithDrift(f)
	applied := f.ApplyFirst()
	hc, err := apiutilHTTPClient()
	require.NoError(t, err)
	mapper, err := apiutil.NewDynamicRESTMapper(env.Config, hc)
	require.NoError(t, err)
	h := &HelmChecker{Config: env.Config, Mapper: mapper}
	rel := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.Release), rel))

	live, missing, err := h.AppliedObjects(context.Background(), rel, f.Repo, applied)
	require.NoError(t, err)
	require.Empty(t, missing)
	var kinds []string
	for _, o := range live {
		require.Equal(t, f.Target, o.GetNamespace())
		require.NotEmpty(t, o.GetResourceVersion(), "a live object, not the manifest's")
		kinds = append(kinds, o.GetKind())
	}
	require.Contains(t, kinds, "Deployment")
	require.Contains(t, kinds, "ConfigMap")

	f.DeleteConfigMap()
	_, missing, err = h.AppliedObjects(context.Background(), rel, f.Repo, applied)
	require.NoError(t, err)
	require.Equal(t, []string{"ConfigMap " + f.Target + "/" + f.Release.Name + "-config"}, missing)

	other := applied.DeepCopy()
	other.Spec.ManifestDigest = sluicev1.SHA256Digest([]byte("another manifest"))
	_, _, err = h.AppliedObjects(context.Background(), rel, f.Repo, other)
	require.ErrorContains(t, err, "not the approved")
}
