package helm

// Attack tests of DESIGN.md §9.8 through the operator's manager, with this
// applier: a pusher who cannot approve rewrites a Release's spec (every push
// does, before anything is planned or approved). Nothing a pending or
// approved change does may follow it: the gate, the apply and the deletion
// read the approved ChangeRequest and the Release's applied status only.

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
)

// submitChange records cr as the syncer does (labelled with its release).
func (f *deleteFixture) submitChange(cr *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	f.t.Helper()
	cr.Labels = map[string]string{sluicev1.LabelRelease: f.release.Name}
	require.NoError(f.t, env.Client.Create(context.Background(), cr))
	return cr
}

// approveAs records a standing approve of cr by approver, a member of group.
func (f *deleteFixture) approveAs(cr *sluicev1.ChangeRequest, approver sluicev1.Identity, group string) {
	f.t.Helper()
	require.NoError(f.t, env.Client.Create(context.Background(), &sluicev1.Approval{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "approval-", Namespace: f.ctl},
		Spec: sluicev1.ApprovalSpec{Release: f.release.Name, ChangeRequest: cr.Name, ApprovalDigest: cr.Spec.ApprovalDigest, Decision: sluicev1.DecisionApprove,
			Approver: approver, Groups: []string{group}, Source: sluicev1.SourceKubernetes},
	}))
}

// push rewrites the Release's spec as the syncer does for every push.
func (f *deleteFixture) push(edit func(*sluicev1.ReleaseSpec)) {
	f.t.Helper()
	ctx := context.Background()
	rel := &sluicev1.Release{}
	require.NoError(f.t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel))
	orig := rel.DeepCopy()
	edit(&rel.Spec)
	require.NoError(f.t, env.Client.Patch(ctx, rel, client.MergeFrom(orig)))
}

// otherNamespace creates a namespace the Repository allows (web-*) where
// the fixture's ServiceAccount has no rights.
func (f *deleteFixture) otherNamespace(name string) string {
	f.t.Helper()
	ns := "web-" + name + "-" + f.ctl
	require.NoError(f.t, env.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	return ns
}

func TestDelete_afterANamespaceMovingPushProdsRuleAppliesAndTheProdWorkloadIsRemoved(t *testing.T) {
	f := newDeleteFixture(t)
	startDeleteManager(t, f, nil)
	ctx := context.Background()
	prod := f.target // where the release is applied
	staging := f.otherNamespace("staging")
	require.NoError(t, env.Client.Create(ctx, &sluicev1.ApprovalPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: "prod-namespace", Namespace: f.ctl},
		Spec: sluicev1.ApprovalPolicySpec{Namespaces: []sluicev1.NamespacePattern{sluicev1.NamespacePattern(prod)},
			Rule: sluicev1.ApprovalRule{Required: 1, Approvers: []sluicev1.Identity{"k8s-group:prod-sre"}}},
	}))
	require.NoError(t, env.Client.Create(ctx, f.repo))
	f.release.Spec.Rule = sluicev1.ApprovalRule{Required: 1}
	require.NoError(t, env.Client.Create(ctx, f.release))
	applied := f.submitChange(f.change("message: prod\n", changeOpts{}))
	f.approveAs(applied, "k8s:pat", "prod-sre")
	f.waitPhase(applied, sluicev1.PhaseApplied)
	require.Eventually(t, func() bool {
		rel := &sluicev1.Release{}
		return env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel) == nil && rel.Status.AppliedTargetNamespace == prod
	}, time.Minute, 50*time.Millisecond)
	require.Len(t, f.helmHistory(), 1)

	// A push (waiting for approval, never approved) moves the environment
	// to the staging namespace; a later one removes the environment, and
	// the syncer proposes the Delete: its deletion records where the
	// workload was applied, its own target namespace is what the push
	// wrote.
	f.push(func(s *sluicev1.ReleaseSpec) { s.TargetNamespace = staging })
	commit := f.change("message: prod\n", changeOpts{}).Spec.Revision
	del := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: sluicev1.DeleteChangeRequestName(f.release.Name, commit, 1), Namespace: f.ctl},
		Spec: sluicev1.ChangeRequestSpec{
			Release: f.release.Name, Operation: sluicev1.OperationDelete, Revision: commit, Attempt: 1,
			TargetNamespace: staging, Delivery: sluicev1.DeliveryHelm,
			Deletion: &sluicev1.DeletionSpec{AppliedChange: applied.Name, AppliedRevision: applied.Spec.Revision, AppliedDigest: applied.Spec.ApprovalDigest,
				TargetNamespace: prod, Delivery: sluicev1.DeliveryHelm, Source: applied.Spec.Source.DeepCopy()},
			Artifact: applied.Spec.Artifact, ContentDigest: applied.Spec.ContentDigest,
			Verdict: sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskHigh},
			Rule:    sluicev1.ApprovalRule{Required: 1},
		},
	}
	del.Spec.ApprovalDigest = del.ExpectedApprovalDigest()
	f.submitChange(del)
	f.waitPhase(del, sluicev1.PhaseAwaitingApproval)

	// A staging approver's approval does not suffice: prod's policy
	// judges a deletion of what was applied in prod. (The operator's own
	// inputs and gate, read now, so the check does not race its cache.)
	f.approveAs(del, "k8s:sam", "staging-sre")
	rel := &sluicev1.Release{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(f.release), rel))
	cur := &sluicev1.ChangeRequest{}
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(del), cur))
	in, err := gateinput.Load(ctx, env.Client, cur, rel)
	require.NoError(t, err)
	var approvals sluicev1.ApprovalList
	require.NoError(t, env.Client.List(ctx, &approvals, client.InNamespace(f.ctl)))
	d, _ := gate.Decide(in, cur, approvals.Items)
	require.False(t, d.Passed, "a staging approver deleted prod: %s (rule %s from %v)", d.Message, d.Rule, d.Rule.Origins)
	require.Contains(t, d.Rule.Origins, "ApprovalPolicy/prod-namespace")
	require.Len(t, f.helmHistory(), 1, "nothing is removed before prod approves")

	f.approveAs(del, "k8s:pat", "prod-sre")
	got := f.waitPhase(del, sluicev1.PhaseApplied)
	require.Equal(t, []sluicev1.Identity{"k8s:pat"}, got.Status.ApprovedBy, "only the prod approver counted")
	f.requireNothingInstalled() // in prod
	require.Contains(t, got.Status.Apply.Message, "Helm release "+f.release.Name+" uninstalled from namespace "+prod,
		"the change (and describe, which shows it) says where the workload was removed from")
	require.Eventually(t, f.releaseGone, time.Minute, 50*time.Millisecond)
}

func TestApply_anUnplannablePushChangesNothingAPendingChangeWillDo(t *testing.T) {
	f := newDeleteFixture(t)
	startDeleteManager(t, f, nil)
	ctx := context.Background()
	elsewhere := f.otherNamespace("elsewhere")
	require.NoError(t, env.Client.Create(ctx, f.repo))
	f.release.Spec.Rule = sluicev1.ApprovalRule{Required: 1}
	require.NoError(t, env.Client.Create(ctx, f.release))
	cr := f.change("message: approved\n", changeOpts{})
	cr.Spec.Rule = sluicev1.ApprovalRule{Required: 1}
	f.submitChange(cr)
	f.waitPhase(cr, sluicev1.PhaseAwaitingApproval)

	// A push that cannot be planned still rewrites the Release's spec:
	// another folder, values, chart, Terraform stack and namespace.
	f.push(func(s *sluicev1.ReleaseSpec) {
		s.SourcePath = "services/evil"
		s.Values = []sluicev1.RelativePath{"evil.yaml"}
		s.Chart = sluicev1.ChartSource{Path: "charts/evil"}
		s.Terraform = &sluicev1.TerraformSource{Dir: "services/evil/terraform", Workspace: "evil"}
		s.TargetNamespace = elsewhere
	})
	f.approve(cr)
	got := f.waitPhase(cr, sluicev1.PhaseApplied)
	require.Contains(t, got.Status.Apply.Message, "Helm release "+f.target+"/"+f.release.Name)
	h := f.helmHistory()
	require.Len(t, h, 1, "installed in the change's namespace")
	require.Equal(t, marker(cr), h[0].Info.Description)
	cm, err := f.configMap()
	require.NoError(t, err)
	require.Equal(t, "approved", cm.Data["message"], "exactly the approved content")
	var secrets corev1.SecretList
	require.NoError(t, env.Client.List(ctx, &secrets, client.InNamespace(elsewhere)))
	require.Empty(t, secrets.Items, "nothing went to the namespace the push wrote")
}

func TestApply_aChangeWithoutASourceIsRefusedAndSaysToReplan(t *testing.T) {
	f := newFixture(t)
	cr := f.change("message: unsourced\n", changeOpts{})
	cr.Spec.Source = nil
	_, err := f.apply(cr)
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonInvalidSpec)
	require.Contains(t, fail.Message, "re-plan")
	f.requireNothingInstalled()
}
