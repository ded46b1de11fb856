package controller

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestCollectable_keepsStandingRejectsAndDeletesTheRestOldestFirst: on a
// digest no change carries, an approver's newest reject stays; everything
// else goes, each approver's newest decision last, so a pass stopped
// half-way never leaves an older reject standing alone.
func TestCollectable_keepsStandingRejectsAndDeletesTheRestOldestFirst(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	gone, live := sluicev1.Digest("sha256:gone"), sluicev1.Digest("sha256:live")
	at := func(name, approver string, d sluicev1.Decision, digest sluicev1.Digest, sec int) sluicev1.Approval {
		return sluicev1.Approval{
			ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(time.Duration(sec) * time.Second))},
			Spec:       sluicev1.ApprovalSpec{Release: "checkout-prod", ApprovalDigest: digest, Decision: d, Approver: sluicev1.Identity(approver)},
		}
	}
	approvals := []sluicev1.Approval{
		at("dave-revoke", "k8s:dave", sluicev1.DecisionRevoke, gone, 5),
		at("bob-reject", "k8s:bob", sluicev1.DecisionReject, gone, 3),
		at("bob-approve", "k8s:bob", sluicev1.DecisionApprove, gone, 1),
		at("dave-reject", "k8s:dave", sluicev1.DecisionReject, gone, 2),
		at("Bob-reject-again", "github:Bob", sluicev1.DecisionReject, gone, 4),
		at("github-bob-reject", "github:bob", sluicev1.DecisionReject, gone, 2),
		at("carol-reject", "k8s:carol", sluicev1.DecisionReject, live, 1),
	}
	var got []string
	for _, a := range collectable(approvals, map[sluicev1.Digest]bool{live: true}) {
		got = append(got, a.Name)
	}
	require.Equal(t, []string{"bob-approve", "dave-reject", "github-bob-reject", "dave-revoke"}, got)
}
