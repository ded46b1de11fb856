package plugin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// kubectl sluice verify settle: refused for a change that is not waiting
// for a person, refused by RBAC for a user without approval rights (no
// Approval is stored), and for carol (an approver) it records her
// verify-fail Approval on the change, in her name, with her reason.
func TestVerifySettle_onlySomeoneWithApprovalRightsSettles(t *testing.T) {
	cr := newChange(t, teamNS, "settle", sluicev1.ApprovalRule{Required: 1})

	_, _, err := sluiceAs(t, carolCfg, "-n", teamNS, "verify", "settle", cr.Name, "--pass", "--reason", "fine")
	require.ErrorContains(t, err, "not waiting for a person")

	setStatus(t, cr, func(s *sluicev1.ChangeRequestStatus) {
		s.Phase = sluicev1.PhaseVerifying
		s.Verification = &sluicev1.VerificationStatus{StartedAt: metav1.Now()}
		s.Conditions = []metav1.Condition{{Type: sluicev1.ConditionVerified, Status: metav1.ConditionUnknown, Reason: sluicev1.ReasonInconclusive,
			Message: "a person decides", LastTransitionTime: metav1.Now()}}
	})
	_, _, err = sluiceAs(t, carolCfg, "-n", teamNS, "verify", "settle", cr.Name, "--pass", "--fail", "--reason", "x")
	require.ErrorContains(t, err, "exactly one of --pass or --fail")
	_, _, err = sluiceAs(t, carolCfg, "-n", teamNS, "verify", "settle", cr.Name, "--fail")
	require.ErrorContains(t, err, "--reason is required")

	// A viewer reads the change but has no approval rights: refused
	// when the Approval is created, and none is stored.
	viewer, err := env.AddUser("mallory", "settle-viewers")
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(context.Background(), &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-viewer-settle", Namespace: teamNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sluice-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "settle-viewers"}},
	}))
	require.Eventually(t, func() bool {
		_, _, err = sluiceAs(t, viewer, "-n", teamNS, "verify", "settle", cr.Name, "--pass", "--reason", "trust me")
		return err != nil && strings.Contains(err.Error(), "record your verify-pass")
	}, time.Minute, 100*time.Millisecond, "the viewer reads the change and is refused at the Approval: %v", err)
	require.ErrorContains(t, err, "forbidden")
	assert.Empty(t, approvalsOf(t, cr), "no Approval was stored for a user without approval rights")

	out, _, err := sluiceAs(t, carolCfg, "-n", teamNS, "verify", "settle", cr.Name, "--fail", "--reason", "latency doubled")
	require.NoError(t, err)
	assert.Contains(t, out, "k8s:carol settled as failed the verification of change "+cr.Name)
	got := approvalsOf(t, cr)
	require.Len(t, got, 1)
	a := got[0].Spec
	assert.Equal(t, sluicev1.DecisionVerifyFail, a.Decision)
	assert.Equal(t, sluicev1.Identity("k8s:carol"), a.Approver)
	assert.Equal(t, cr.Name, a.ChangeRequest)
	assert.Equal(t, cr.Spec.ApprovalDigest, a.ApprovalDigest)
	assert.Equal(t, "latency doubled", a.Comment)
	assert.Contains(t, a.Groups, "sre", "admission stamped her groups")
}
