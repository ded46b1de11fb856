package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// gammaTF is a Terraform stack of the built-in terraform_data resource.
const gammaTF = `variable "env" {
  type = string
}

resource "terraform_data" "bucket" {
  input = "gamma-${var.env}"
}
`

// gammaService writes service gamma (chart and Terraform stack) with the
// given environments; its rule in git is as loose as a rule gets.
func gammaService(r *gittest.Repo, envs ...string) {
	m := "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: gamma\nowners: [team-gamma]\nchart: {path: charts/service}\nvalues: [values.yaml]\nterraform: {dir: terraform}\nenvironments:\n"
	for _, e := range envs {
		m += fmt.Sprintf("  - name: %s\n    namespace: gamma-%s\n    terraform: {vars: {env: %s}}\n    delivery: helm\n    approval: {required: 0, autoApproveRisk: high}\n", e, e, e)
	}
	r.WriteFile("services/gamma/service.yaml", m)
	r.WriteFile("services/gamma/values.yaml", "image:\n  repository: ghcr.io/example/gamma\n  tag: \"1.0.0\"\nreplicaCount: 1\n")
	r.WriteFile("services/gamma/terraform/main.tf", gammaTF)
}

// markAppliedWithRule records cr as the release's applied change, as the operator
// does once it applied it, with rule as the applied rule.
func markAppliedWithRule(t *testing.T, ns string, cr sluicev1.ChangeRequest, rule sluicev1.ApprovalRule) {
	t.Helper()
	rel := getRelease(t, ns, cr.Spec.Release)
	orig := rel.DeepCopy()
	rel.Status.AppliedChange, rel.Status.AppliedRevision, rel.Status.AppliedDigest = cr.Name, cr.Spec.Revision, cr.Spec.ApprovalDigest
	rel.Status.AppliedRule = &rule
	require.NoError(t, k8s.Status().Patch(context.Background(), rel, client.MergeFrom(orig)))
}

func TestSync_removedEnvironmentProposesADeleteChangeAndRemovesNothing(t *testing.T) {
	ns := newNamespace(t)
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	fixture.CopyDir(chartDir, "charts/service")
	gammaService(fixture, "staging", "prod")
	first := fixture.Commit("gamma", "alice@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL(), func(r *sluicev1.Repository) { r.Spec.Prune = true })
	waitHandled(t, repo, requestReconcile(t, repo))
	applied := changeRequests(t, ns)[sluicev1.ChangeRequestName("gamma-staging", first, 1)]
	require.NotEmpty(t, applied.Name)
	// Rollback is what the API server defaults it to.
	appliedRule := sluicev1.ApprovalRule{Required: 1, Approvers: []sluicev1.Identity{"k8s:alice"}, AutoApproveRisk: sluicev1.AutoApproveNone, Rollback: sluicev1.RollbackApproval}
	markAppliedWithRule(t, ns, applied, appliedRule)

	// A pusher removes staging from the manifest.
	gammaService(fixture, "prod")
	removal := fixture.Commit("drop staging", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))

	name := sluicev1.DeleteChangeRequestName("gamma-staging", removal, 1)
	crs := changeRequests(t, ns)
	del, ok := crs[name]
	require.True(t, ok, "a Delete change %s, have %v", name, keys(crs))
	assert.Equal(t, sluicev1.OperationDelete, del.Spec.Operation)
	assert.Equal(t, removal, del.Spec.Revision)
	assert.Equal(t, first, del.Spec.PreviousRevision, "described at the applied revision")
	assert.Equal(t, sluicev1.RiskHigh, del.Spec.Verdict.Risk)
	assert.Equal(t, appliedRule, del.Spec.Rule, "the applied rule, not the loose rule the removed environment had in git")
	assert.Contains(t, del.Spec.Authors, sluicev1.Identity("email:mallory@example.com"))
	assert.Equal(t, del.ExpectedApprovalDigest(), del.Spec.ApprovalDigest)
	assert.NotEqual(t, sluicev1.ComputeApprovalDigest(ns, "gamma-staging", del.Spec.ContentDigest, del.Spec.ManifestDigest, del.Spec.PlanDigest), del.Spec.ApprovalDigest,
		"an approval of the same content as an Apply never counts for the Delete")
	assert.Equal(t, applied.Spec.ContentDigest, del.Spec.ContentDigest, "the artifact of the applied revision")
	assert.Equal(t, applied.Spec.ManifestDigest, del.Spec.ManifestDigest, "the applied manifest")
	require.NotNil(t, del.Spec.Deletion)
	assert.Equal(t, applied.Name, del.Spec.Deletion.AppliedChange)
	assert.Equal(t, applied.Spec.ApprovalDigest, del.Spec.Deletion.AppliedDigest)
	var kinds []string
	for _, o := range del.Spec.Deletion.Objects {
		kinds = append(kinds, o.Kind+"/"+o.Namespace+"/"+o.Name)
	}
	assert.Contains(t, kinds, "Deployment/gamma-staging/gamma-staging")
	require.NotNil(t, del.Spec.Deletion.Terraform)
	assert.Equal(t, map[string]string{"env": "staging"}, del.Spec.Deletion.Terraform.Vars)

	// The destroy plan is stored and digested like any plan.
	require.NotEmpty(t, del.Spec.PlanFileSHA256)
	require.NotEmpty(t, del.Spec.PlanDigest)
	require.NotNil(t, del.Spec.PlanSummary)
	plan := &corev1.Secret{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: sluicev1.PlanSecretName(name, 0)}, plan))
	assert.Equal(t, del.Spec.PlanFileSHA256, sluicev1.SHA256Digest(plan.Data[sluicev1.PlanSecretKey]))

	// Nothing is deleted by the syncer.
	rel := getRelease(t, ns, "gamma-staging")
	assert.True(t, rel.DeletionTimestamp.IsZero(), "the Release stays until the Delete is approved and applied")
	assert.Equal(t, name, rel.Status.LatestChange)

	// Syncing again (or after a restart) proposes nothing new.
	fixture.WriteFile("README.md", "hello\n")
	fixture.Commit("readme", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	count := 0
	for _, cr := range changeRequests(t, ns) {
		if cr.Spec.Release == "gamma-staging" && cr.IsDelete() {
			count++
		}
	}
	assert.Equal(t, 1, count, "one pending Delete, whatever else is pushed")

	// A revert brings the release back: a new Apply change, which
	// supersedes the pending Delete at the gate (it is newer).
	time.Sleep(time.Until(del.CreationTimestamp.Add(1100 * time.Millisecond))) // creation times have one-second resolution
	gammaService(fixture, "staging", "prod")
	revert := fixture.Commit("Revert \"drop staging\"", "alice@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	back, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("gamma-staging", revert, 1)]
	require.True(t, ok, "the revert is a change of its own")
	assert.Equal(t, sluicev1.OperationApply, back.OperationOf())
	assert.True(t, back.CreationTimestamp.After(del.CreationTimestamp.Time), "newer than the Delete, so it supersedes it")
}

func TestSync_pruneOffMarksTheReleaseOrphanedAndProposesNothing(t *testing.T) {
	ns := newNamespace(t)
	fixture := seedHelmRepo(t, t.TempDir(), "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))
	before := len(changeRequests(t, ns))

	fixture.Remove("services/beta")
	fixture.Commit("retire beta", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	waitReady(t, repo, metav1.ConditionTrue, sluicev1.ReasonServiceRemoved)
	rel := getRelease(t, ns, "beta-staging")
	c := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionOrphaned)
	require.NotNil(t, c, "Orphaned is set")
	assert.Equal(t, metav1.ConditionTrue, c.Status)
	assert.Equal(t, sluicev1.ReasonServiceRemoved, c.Reason)
	assert.Len(t, changeRequests(t, ns), before, "no change proposed")
	assert.True(t, rel.DeletionTimestamp.IsZero())

	helmService(fixture, "beta", "staging")
	fixture.Commit("beta is back", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	require.Eventually(t, func() bool {
		c := meta.FindStatusCondition(getRelease(t, ns, "beta-staging").Status.Conditions, sluicev1.ConditionOrphaned)
		return c != nil && c.Status == metav1.ConditionFalse
	}, timeout, tick, "Orphaned clears when the release is back")
}
