package controller

import (
	"bytes"
	"context"
	"testing"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sluice-gitops/sluice/kit/testenv"
	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The chunking of plan files is a pure step; a fake client is enough here.
func TestWritePlanSecrets_splitsPastTheChunkSizeAndReassembles(t *testing.T) {
	scheme := testenv.Scheme()
	c := fake.NewClientBuilder().WithScheme(scheme).Build()
	r := &RepositoryReconciler{Client: c, APIReader: c}
	plan := bytes.Repeat([]byte("0123456789abcdef"), (2*sluicev1.PlanChunkSize+1000)/16)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{Name: "web-staging-0123456789", Namespace: "team", UID: "uid-1", Labels: map[string]string{sluicev1.LabelRepository: "infra"}},
		Spec:       sluicev1.ChangeRequestSpec{Release: "web-staging", PlanFileSHA256: sluicev1.SHA256Digest(plan)},
	}
	ctx := context.Background()
	ok, err := r.planSecretsComplete(ctx, cr)
	require.NoError(t, err)
	assert.False(t, ok)

	require.NoError(t, r.writePlanSecrets(ctx, cr, plan))
	require.NoError(t, r.writePlanSecrets(ctx, cr, plan), "a retry finds the same content and moves on")
	var list corev1.SecretList
	require.NoError(t, c.List(ctx, &list, client.InNamespace("team")))
	names := map[string]int{}
	for _, s := range list.Items {
		names[s.Name] = len(s.Data[sluicev1.PlanSecretKey])
		assert.Equal(t, cr.Name, s.Labels[sluicev1.LabelChangeRequest])
		assert.Equal(t, "ChangeRequest", s.OwnerReferences[0].Kind)
	}
	assert.Equal(t, map[string]int{
		"web-staging-0123456789-plan":   sluicev1.PlanChunkSize,
		"web-staging-0123456789-plan-1": sluicev1.PlanChunkSize,
		"web-staging-0123456789-plan-2": len(plan) - 2*sluicev1.PlanChunkSize,
	}, names)
	ok, err = r.planSecretsComplete(ctx, cr)
	require.NoError(t, err)
	assert.True(t, ok)

	assert.Error(t, r.writePlanSecrets(ctx, cr, append([]byte("x"), plan...)), "other content under the same name is refused")
}

func TestVerdictResult_findingsOnlyMakeItStricter(t *testing.T) {
	deny := sluicev1.Finding{Severity: sluicev1.SeverityDeny, Message: "no"}
	warn := sluicev1.Finding{Severity: sluicev1.SeverityWarn, Message: "hm"}
	assert.Equal(t, sluicev1.VerdictFail, changespec.VerdictResult(sluicev1.VerdictPass, []sluicev1.Finding{deny}))
	assert.Equal(t, sluicev1.VerdictWarn, changespec.VerdictResult(sluicev1.VerdictPass, []sluicev1.Finding{warn}))
	assert.Equal(t, sluicev1.VerdictFail, changespec.VerdictResult(sluicev1.VerdictFail, nil))
	assert.Equal(t, sluicev1.VerdictWarn, changespec.VerdictResult(sluicev1.VerdictWarn, nil))
	assert.Equal(t, sluicev1.VerdictPass, changespec.VerdictResult(sluicev1.VerdictPass, nil))
}

func TestCleanFindings_redactsAndBounds(t *testing.T) {
	in := []sluicev1.Finding{{Severity: "bogus", Message: "clone https://user:hunter2@git.example.com/x.git failed"}}
	for range 600 {
		in = append(in, sluicev1.Finding{Severity: sluicev1.SeverityInfo, Message: "x"})
	}
	out, truncated := changespec.CleanFindings(in, 0)
	assert.Len(t, out, 500)
	assert.EqualValues(t, 101, truncated)
	assert.Equal(t, sluicev1.SeverityDeny, out[0].Severity, "unknown severities never pass silently")
	assert.NotContains(t, out[0].Message, "hunter2")
}

func TestIdentities_keepOnlyValidEmails(t *testing.T) {
	assert.Equal(t, []sluicev1.Identity{"email:a@example.com", "email:b@example.com"},
		changespec.EmailIdentities([]string{"a@example.com", "", "b@example.com", "a@example.com", "bad email@x", ":x@y"}))
}

func TestTruncate_keepsValidUTF8(t *testing.T) {
	assert.Equal(t, "abc", text.Truncate("abc", 10))
	assert.Equal(t, "ab…", text.Truncate("abcdef", 2))
	assert.Equal(t, "a…", text.Truncate("aé", 2), "never cuts inside a rune")
	assert.Equal(t, "a\uFFFDb", text.Truncate("a\xffb", 10))
}

// resumePoint reads in full only the ChangeRequests named as attempts of
// the change: the first name, then "-r2", "-r3"…; not another revision's,
// a preview's, a Delete change's or a rollback's, and for a rollback only
// the attempts of that rollback.
func TestChangeAttemptNames_onlyTheAttemptsOfTheChange(t *testing.T) {
	rev := "0123456789abcdef0123456789abcdef01234567"
	rel := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: "web-prod", Namespace: "ctl"}}
	items := func(names ...string) []metav1.PartialObjectMetadata {
		out := make([]metav1.PartialObjectMetadata, len(names))
		for i, n := range names {
			out[i].Name = n
		}
		return out
	}
	all := items(
		"web-prod-0123456789", "web-prod-0123456789-r2", "web-prod-0123456789-r11",
		"web-prod-0123456789-r1", "web-prod-0123456789-r02", "web-prod-0123456789-rx", "web-prod-0123456789-r2x",
		"web-prod-fedcba9876", "web-prod-pr3-0123456789", "web-prod-del-0123456789",
		"web-prod-rb-0123456789", "web-prod-rb-0123456789-r2", "web-prod-0123456789ab",
	)
	plan := &changePlan{release: rel, revision: rev}
	assert.Equal(t, []string{"web-prod-0123456789", "web-prod-0123456789-r2", "web-prod-0123456789-r11"}, changeAttemptNames(plan, all))

	rb := &changePlan{release: rel, revision: rev, rollback: &sluicev1.RollbackSpec{Of: "web-prod-0123456789"}}
	assert.Equal(t, []string{"web-prod-rb-0123456789", "web-prod-rb-0123456789-r2"}, changeAttemptNames(rb, all))
	assert.Empty(t, changeAttemptNames(plan, nil))
}
