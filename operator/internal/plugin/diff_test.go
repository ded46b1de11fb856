package plugin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/plugin"
)

const diffPlan = `{"format_version":"1.2","resource_changes":[
 {"address":"aws_db_instance.main","change":{"actions":["delete","create"],"before":{"engine_version":"14","password":"pw-hunter2-xyz"},"after":{"engine_version":"15","password":"pw-hunter2-xyz"},
  "after_unknown":{"id":true},"before_sensitive":{"password":true},"after_sensitive":{"password":true},"replace_paths":[["engine_version"]]}}]}`

// reviewOf is the ConfigMap the syncer stores beside every change
// (changespec.StoreReview): controlled by the change, labelled a review,
// stamped with the change's approvalDigest.
func reviewOf(t *testing.T, cr *sluicev1.ChangeRequest) *corev1.ConfigMap {
	t.Helper()
	s, err := review.Build(review.Input{Change: cr, PlanJSON: []byte(diffPlan),
		Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: x}\ndata: {replicas: \"3\"}\n"})
	require.NoError(t, err)
	cm, err := review.NewConfigMap(cr, s)
	require.NoError(t, err)
	cm.Annotations = map[string]string{review.AnnotationApprovalDigest: string(cr.Spec.ApprovalDigest)}
	return cm
}

// storeReview stores cr's review as the syncer does (admission lets
// nobody else write one).
func storeReview(t *testing.T, cr *sluicev1.ChangeRequest) {
	t.Helper()
	require.NoError(t, syncer.Create(context.Background(), reviewOf(t, cr)))
}

func TestDiff_printsThePlanAndManifestDiffTheReviewerSaw(t *testing.T) {
	cr := newChange(t, teamNS, "diffa", sluicev1.ApprovalRule{Required: 1})
	storeReview(t, cr)

	out, _, err := sluice(t, "-n", teamNS, "diff", cr.Name)
	require.NoError(t, err, "carol holds only the shipped sluice-approver role")
	assert.Contains(t, out, "-/+ aws_db_instance.main must be replaced")
	assert.Contains(t, out, `~ engine_version = "14" -> "15" # forces replacement`)
	assert.Contains(t, out, "+kind: ConfigMap")
	assert.Contains(t, out, string(cr.Spec.ApprovalDigest))
	assert.NotContains(t, out, "pw-hunter2-xyz")
	assert.NotContains(t, out, "\x1b[", "no colour when not a terminal")

	coloured, _, err := sluice(t, "-n", teamNS, "diff", cr.Name, "--color", "always")
	require.NoError(t, err)
	assert.Contains(t, coloured, "\x1b[32m+kind: ConfigMap\x1b[0m")

	md, _, err := sluice(t, "-n", teamNS, "diff", cr.Name, "--format", "markdown")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(md, review.Marker+" part=1 -->\n## Sluice review"), "the comment as posted")
	assert.Contains(t, md, "-/+ aws_db_instance.main must be replaced")
	assert.NotContains(t, md, "pw-hunter2-xyz")

	described, _, err := sluice(t, "-n", teamNS, "describe", cr.Name)
	require.NoError(t, err)
	assert.Contains(t, described, "kubectl sluice diff "+cr.Name)
}

// TestDiff_aViewerBoundInTheControlNamespaceReadsTheReview: a user whose
// only grant is the shipped sluice-viewer role, bound in the control
// namespace, runs diff; without the role the review is refused.
func TestDiff_aViewerBoundInTheControlNamespaceReadsTheReview(t *testing.T) {
	ctx := context.Background()
	cr := newChange(t, teamNS, "diffv", sluicev1.ApprovalRule{Required: 1})
	storeReview(t, cr)
	vera, err := env.AddUser("vera", "auditors")
	require.NoError(t, err)

	_, _, err = sluiceAs(t, vera, "-n", teamNS, "diff", cr.Name)
	require.Error(t, err, "no role, no review")

	require.NoError(t, env.Client.Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "sluice-viewer-auditors", Namespace: teamNS},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "sluice-viewer"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: "auditors"}},
	}))
	require.Eventually(t, func() bool {
		_, _, err := sluiceAs(t, vera, "-n", teamNS, "diff", cr.Name)
		return err == nil
	}, time.Minute, 100*time.Millisecond, "the RoleBinding takes effect")
	out, errOut, err := sluiceAs(t, vera, "-n", teamNS, "diff", cr.Name)
	require.NoError(t, err)
	assert.Empty(t, errOut)
	assert.Contains(t, out, "-/+ aws_db_instance.main must be replaced")

	// The role reads the review, not the control namespace's Secrets.
	err = env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "diffv-credentials", Namespace: teamNS}, StringData: map[string]string{"token": "x"}})
	require.NoError(t, err)
	veraClient, err := client.New(vera, client.Options{Scheme: env.Scheme})
	require.NoError(t, err)
	err = veraClient.Get(ctx, client.ObjectKey{Namespace: teamNS, Name: "diffv-credentials"}, &corev1.Secret{})
	assert.Error(t, err, "sluice-viewer grants no Secret")
}

// TestDiff_refusesAReviewThatIsNotTheChanges: ConfigMaps named as the
// change's review that admission lets through (an unlabelled one someone
// who writes ConfigMaps planted with an owner reference to the change) or
// that are not this change's (another digest, not controlled by it) are
// refused by diff, not shown.
func TestDiff_refusesAReviewThatIsNotTheChanges(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name   string
		forge  func(cm *corev1.ConfigMap)
		writer client.Client
		reason string
	}{
		{"planted without the review label, owned by the change", func(cm *corev1.ConfigMap) { cm.Labels = nil }, env.Client, "not labelled"},
		{"stored for another digest", func(cm *corev1.ConfigMap) {
			cm.Annotations[review.AnnotationApprovalDigest] = string(sluicev1.SHA256Digest([]byte("other content")))
		}, syncer, "approval digest"},
		{"without a digest", func(cm *corev1.ConfigMap) { cm.Annotations = nil }, syncer, "approval digest"},
		{"not controlled by the change", func(cm *corev1.ConfigMap) { cm.OwnerReferences = nil }, syncer, "does not control it"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cr := newChange(t, teamNS, fmt.Sprintf("diffb%d", i), sluicev1.ApprovalRule{Required: 1})
			cm := reviewOf(t, cr)
			tt.forge(cm)
			require.NoError(t, tt.writer.Create(ctx, cm))

			out, _, err := sluice(t, "-n", teamNS, "diff", cr.Name)
			var untrusted *plugin.UntrustedReviewError
			require.ErrorAs(t, err, &untrusted)
			assert.Contains(t, err.Error(), tt.reason)
			assert.NotContains(t, out, "aws_db_instance.main", "the forged review is not shown")
		})
	}
}
