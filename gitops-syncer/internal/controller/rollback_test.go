package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// setPhase writes a ChangeRequest's phase, as the operator does.
func setPhase(t *testing.T, cr *sluicev1.ChangeRequest, phase sluicev1.ChangeRequestPhase) {
	t.Helper()
	orig := cr.DeepCopy()
	cr.Status.Phase = phase
	require.NoError(t, k8s.Status().Patch(context.Background(), cr, client.MergeFrom(orig)))
}

// askRollback records the operator's decision to roll back of to to, then
// the annotation, as the operator does (status first).
func askRollback(t *testing.T, ns, release, of, to string) {
	t.Helper()
	rel := getRelease(t, ns, release)
	orig := rel.DeepCopy()
	now := metav1.Now()
	rel.Status.Rollback = &sluicev1.RollbackDecision{Of: of, To: to, Requested: true, Reason: sluicev1.ReasonRollbackRequested, DecidedAt: &now}
	rel.Status.LastVerified = &sluicev1.VerifiedChange{ChangeRequest: to}
	require.NoError(t, k8s.Status().Patch(context.Background(), rel, client.MergeFrom(orig)))
	annotate(t, ns, release, sluicev1.RollbackAnnotation(of), to)
}

func annotate(t *testing.T, ns, release, key, value string) {
	t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, key, value)
	require.NoError(t, k8s.Patch(context.Background(), &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: release}}, client.RawPatch("application/merge-patch+json", []byte(patch))))
}

// verifiedThenFailed syncs v1 of alpha-staging (Verified) and v2 with a
// new image tag (applied, then VerificationFailed), and returns both.
func verifiedThenFailed(t *testing.T, ns string, fixture *gittest.Repo, repo *sluicev1.Repository) (v1, v2 sluicev1.ChangeRequest) {
	t.Helper()
	first := fixture.Head("main")
	waitHandled(t, repo, requestReconcile(t, repo))
	v1 = changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", first, 1)]
	require.NotEmpty(t, v1.Name)
	markAppliedIn(t, ns, v1, "alpha-staging")
	setPhase(t, &v1, sluicev1.PhaseVerified)
	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"2.0.0\"\nreplicaCount: 1\n")
	second := fixture.Commit("alpha 2.0.0", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	v2 = changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", second, 1)]
	require.NotEmpty(t, v2.Name)
	markAppliedIn(t, ns, v2, "alpha-staging")
	setPhase(t, &v2, sluicev1.PhaseVerificationFailed)
	return v1, v2
}

// The operator's request is answered with one rollback ChangeRequest:
// the verified change's revision rebuilt, exactly its content and
// manifest, spec.rollback {of, to} in the digest, an info finding, the
// Release's latestChange; the branch's head is not proposed again, and a
// restarted syncer creates nothing twice.
func TestRollback_requestIsAnsweredWithOneRollbackChange(t *testing.T) {
	ns := newNamespace(t)
	fixture := seedHelmRepo(t, t.TempDir(), "infra")
	s := startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	v1, v2 := verifiedThenFailed(t, ns, fixture, repo)

	askRollback(t, ns, "alpha-staging", v2.Name, v1.Name)
	name := sluicev1.RollbackChangeRequestName("alpha-staging", v2.Name, 1)
	var rb sluicev1.ChangeRequest
	require.Eventually(t, func() bool {
		var ok bool
		rb, ok = changeRequests(t, ns)[name]
		return ok
	}, 2*time.Minute, 50*time.Millisecond, "no rollback ChangeRequest %s", name)
	require.Equal(t, &sluicev1.RollbackSpec{Of: v2.Name, To: v1.Name}, rb.Spec.Rollback)
	require.Equal(t, v1.Spec.Revision, rb.Spec.Revision)
	require.Equal(t, v1.Spec.ContentDigest, rb.Spec.ContentDigest)
	require.Equal(t, v1.Spec.ManifestDigest, rb.Spec.ManifestDigest)
	require.Equal(t, v1.Spec.Artifact.SHA256, rb.Spec.Artifact.SHA256)
	require.Equal(t, v1.Spec.Source, rb.Spec.Source)
	require.Equal(t, v2.Spec.Revision, rb.Spec.PreviousRevision)
	require.Equal(t, rb.ExpectedApprovalDigest(), rb.Spec.ApprovalDigest)
	require.NotEqual(t, v1.Spec.ApprovalDigest, rb.Spec.ApprovalDigest, "the rollback claim is digested")
	found := false
	for _, f := range rb.Spec.Verdict.Findings {
		if f.Severity == sluicev1.SeverityInfo && strings.Contains(f.Message, fmt.Sprintf("rollback of %s to %s", v2.Name, v1.Name)) {
			found = true
		}
	}
	require.True(t, found, "info finding: %+v", rb.Spec.Verdict.Findings)
	require.Eventually(t, func() bool { return getRelease(t, ns, "alpha-staging").Status.LatestChange == name }, 2*time.Minute, 50*time.Millisecond)
	rel := getRelease(t, ns, "alpha-staging")
	require.Equal(t, v2.Spec.Revision, rel.Status.LastSyncedCommit, "the branch stays synced at its head")

	// A restarted syncer, asked again, creates nothing.
	s.stop()
	startSyncer(t, ns, "")
	waitHandled(t, repo, requestReconcile(t, repo))
	var alpha []string
	for _, cr := range changeRequests(t, ns) {
		if cr.Spec.Release == "alpha-staging" {
			alpha = append(alpha, cr.Name)
		}
	}
	require.ElementsMatch(t, []string{v1.Name, v2.Name, name}, alpha, "v1, v2 and one rollback; the head is not proposed again")
}

// waitRolledBack waits for release's RolledBack condition and returns it.
func waitRolledBack(t *testing.T, ns, release string) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	require.Eventually(t, func() bool {
		c = meta.FindStatusCondition(getRelease(t, ns, release).Status.Conditions, sluicev1.ConditionRolledBack)
		return c != nil
	}, 2*time.Minute, 50*time.Millisecond)
	return c
}

// A rollback whose verified change is gone is declined, once: an Event and
// RolledBack=False RollbackDeclined saying why; no ChangeRequest.
func TestRollback_aGoneVerifiedChangeIsDeclined(t *testing.T) {
	ns := newNamespace(t)
	fixture := seedHelmRepo(t, t.TempDir(), "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	v1, v2 := verifiedThenFailed(t, ns, fixture, repo)
	require.NoError(t, k8s.Delete(context.Background(), &v1))

	askRollback(t, ns, "alpha-staging", v2.Name, v1.Name)
	c := waitRolledBack(t, ns, "alpha-staging")
	require.Equal(t, metav1.ConditionFalse, c.Status)
	require.Equal(t, sluicev1.ReasonRollbackDeclined, c.Reason)
	require.Contains(t, c.Message, "rollback of "+v2.Name+" to "+v1.Name+" declined: the verified change "+v1.Name+" is gone")
	waitHandled(t, repo, requestReconcile(t, repo))
	for _, cr := range changeRequests(t, ns) {
		require.Nil(t, cr.Spec.Rollback, "a declined rollback created %s", cr.Name)
	}
}

// A rollback annotation the operator's status does not hold (written by
// anyone else) builds nothing.
func TestRollback_anAnnotationWithoutTheOperatorsDecisionIsIgnored(t *testing.T) {
	ns := newNamespace(t)
	fixture := seedHelmRepo(t, t.TempDir(), "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	v1, v2 := verifiedThenFailed(t, ns, fixture, repo)
	annotate(t, ns, "alpha-staging", sluicev1.RollbackAnnotation(v2.Name), v1.Name)
	waitHandled(t, repo, requestReconcile(t, repo))
	for _, cr := range changeRequests(t, ns) {
		require.Nil(t, cr.Spec.Rollback, "a forged request created %s", cr.Name)
	}
	require.Nil(t, meta.FindStatusCondition(getRelease(t, ns, "alpha-staging").Status.Conditions, sluicev1.ConditionRolledBack))
}

// A verified change whose revision is gone from the repository, or whose
// artifact rebuilt from git is not its recorded content, is declined
// with the reason; no rollback ChangeRequest is made.
func TestRollback_aGoneRevisionOrAnotherArtifactIsDeclined(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(spec *sluicev1.ChangeRequestSpec)
		want string
	}{
		{"revision gone", func(s *sluicev1.ChangeRequestSpec) { s.Revision = strings.Repeat("d", 40) }, "is gone from the repository"},
		{"another artifact", func(s *sluicev1.ChangeRequestSpec) {
			s.ContentDigest = sluicev1.SHA256Digest([]byte("other content"))
		}, "is not the verified one"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := newNamespace(t)
			fixture := seedHelmRepo(t, t.TempDir(), "infra")
			startSyncer(t, ns, "")
			repo := newRepository(t, ns, "infra", fixture.FileURL())
			v1, v2 := verifiedThenFailed(t, ns, fixture, repo)
			// A verified change that records what the case says.
			other := &sluicev1.ChangeRequest{ObjectMeta: metav1.ObjectMeta{Name: "alpha-staging-other00000", Namespace: ns, Labels: v1.Labels}, Spec: *v1.Spec.DeepCopy()}
			c.edit(&other.Spec)
			other.Spec.ApprovalDigest = other.ExpectedApprovalDigest()
			require.NoError(t, k8s.Create(context.Background(), other))
			setPhase(t, other, sluicev1.PhaseVerified)

			askRollback(t, ns, "alpha-staging", v2.Name, other.Name)
			cond := waitRolledBack(t, ns, "alpha-staging")
			require.Equal(t, sluicev1.ReasonRollbackDeclined, cond.Reason)
			require.Contains(t, cond.Message, "rollback of "+v2.Name+" to "+other.Name+" declined: ")
			require.Contains(t, cond.Message, c.want)
			for _, cr := range changeRequests(t, ns) {
				require.Nil(t, cr.Spec.Rollback, "a declined rollback created %s", cr.Name)
			}
		})
	}
}
