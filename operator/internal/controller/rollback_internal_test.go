package controller

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// endedAt is a change of the release in phase p whose verification ended
// at minute m.
func endedAt(name string, p sluicev1.ChangeRequestPhase, m int) sluicev1.ChangeRequest {
	t := metav1.NewTime(time.Date(2026, 12, 4, 12, m, 0, 0, time.UTC))
	cr := sluicev1.ChangeRequest{ObjectMeta: metav1.ObjectMeta{Name: name}}
	cr.Spec.ApprovalDigest = sluicev1.SHA256Digest([]byte("approval " + name))
	cr.Spec.ContentDigest = sluicev1.SHA256Digest([]byte("content " + name))
	cr.Status.Phase = p
	cr.Status.Verification = &sluicev1.VerificationStatus{StartedAt: t, FinishedAt: &t}
	return cr
}

// The quarantine keeps the newest MaxQuarantine failed changes, newest
// first, and a second pass over the same changes changes nothing (also
// for a change that fell out of it and is still there).
func TestRecordQuarantine_keepsTheNewest16AndIsStable(t *testing.T) {
	s := &releaseScope{rel: &sluicev1.Release{}}
	for i := range 18 {
		s.changes = append(s.changes, endedAt(fmt.Sprintf("web-prod-%02d", i), sluicev1.PhaseVerificationFailed, i))
	}
	s.changes = append(s.changes, endedAt("web-prod-ok", sluicev1.PhaseVerified, 30))
	recordQuarantine(s)
	q := s.rel.Status.Quarantine
	require.Len(t, q, sluicev1.MaxQuarantine)
	require.Equal(t, "web-prod-17", q[0].ChangeRequest)
	require.Equal(t, "web-prod-02", q[15].ChangeRequest)
	require.Equal(t, s.changes[17].Spec.ContentDigest, q[0].ContentDigest)
	before := s.rel.Status.DeepCopy()
	recordQuarantine(s)
	require.True(t, equality.Semantic.DeepEqual(*before, s.rel.Status), "a second pass changed the quarantine")
}

// lastVerified is the newest Verified change; an older one never
// replaces it, and a recorded change that is gone stays.
func TestRecordVerified_newestOnly(t *testing.T) {
	s := &releaseScope{rel: &sluicev1.Release{}, changes: []sluicev1.ChangeRequest{
		endedAt("web-prod-b", sluicev1.PhaseVerified, 20), endedAt("web-prod-a", sluicev1.PhaseVerified, 10),
		endedAt("web-prod-c", sluicev1.PhaseVerificationFailed, 30),
	}}
	recordVerified(s)
	require.Equal(t, "web-prod-b", s.rel.Status.LastVerified.ChangeRequest)
	s.changes = s.changes[1:] // b was deleted
	recordVerified(s)
	require.Equal(t, "web-prod-b", s.rel.Status.LastVerified.ChangeRequest, "an older change replaced the recorded one")
}
