package plugin_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const diffPlan = `{"format_version":"1.2","resource_changes":[
 {"address":"aws_db_instance.main","change":{"actions":["delete","create"],"before":{"engine_version":"14","password":"pw-hunter2-xyz"},"after":{"engine_version":"15","password":"pw-hunter2-xyz"},
  "after_unknown":{"id":true},"before_sensitive":{"password":true},"after_sensitive":{"password":true},"replace_paths":[["engine_version"]]}}]}`

// storeReview writes the Secret the syncer stores beside a preview.
func storeReview(t *testing.T, cr *sluicev1.ChangeRequest, owned bool) {
	t.Helper()
	s, err := review.Build(review.Input{Change: cr, PlanJSON: []byte(diffPlan),
		Manifest: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: web, namespace: x}\ndata: {replicas: \"3\"}\n"})
	require.NoError(t, err)
	data, err := review.Encode(s)
	require.NoError(t, err)
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: review.SecretName(cr.Name), Namespace: cr.Namespace}, Data: map[string][]byte{review.SecretKey: data}}
	if owned {
		require.NoError(t, controllerutil.SetControllerReference(cr, sec, env.Client.Scheme()))
	}
	require.NoError(t, env.Client.Create(context.Background(), sec))
}

func TestDiff_printsThePlanAndManifestDiffTheReviewerSaw(t *testing.T) {
	cr := newChange(t, teamNS, "diffa", sluicev1.ApprovalRule{Required: 1})
	storeReview(t, cr, true)

	out, _, err := sluiceAs(t, env.Config, "-n", teamNS, "diff", cr.Name)
	require.NoError(t, err)
	assert.Contains(t, out, "-/+ aws_db_instance.main must be replaced")
	assert.Contains(t, out, `~ engine_version = "14" -> "15" # forces replacement`)
	assert.Contains(t, out, "+kind: ConfigMap")
	assert.Contains(t, out, string(cr.Spec.ApprovalDigest))
	assert.NotContains(t, out, "pw-hunter2-xyz")
	assert.NotContains(t, out, "\x1b[", "no colour when not a terminal")

	coloured, _, err := sluiceAs(t, env.Config, "-n", teamNS, "diff", cr.Name, "--color", "always")
	require.NoError(t, err)
	assert.Contains(t, coloured, "\x1b[32m+kind: ConfigMap\x1b[0m")

	described, _, err := sluiceAs(t, env.Config, "-n", teamNS, "describe", cr.Name)
	require.NoError(t, err)
	assert.Contains(t, described, "kubectl sluice diff "+cr.Name)
}

func TestDiff_ignoresAReviewSecretTheChangeDoesNotOwn(t *testing.T) {
	cr := newChange(t, teamNS, "diffb", sluicev1.ApprovalRule{Required: 1})
	storeReview(t, cr, false) // planted by someone else: not the change's

	out, errOut, err := sluiceAs(t, env.Config, "-n", teamNS, "diff", cr.Name)
	require.NoError(t, err)
	assert.Contains(t, errOut, "No review is stored")
	assert.NotContains(t, out, "aws_db_instance.main")
	assert.Contains(t, out, string(cr.Spec.ApprovalDigest))
}
