package controller_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const (
	extraConfigMap = `apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-extra
data:
  greeting: hello
`
	readerRole = `apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: {{ .Release.Name }}-reader
rules:
  - apiGroups: [""]
    resources: ["configmaps"]
    verbs: ["get"]
`
)

// pushAndGet commits what the test wrote, has the syncer reconcile, and
// returns the ChangeRequest of release at the new commit.
func pushAndGet(t *testing.T, fixture *gittest.Repo, repo *sluicev1.Repository, ns, release, msg string) sluicev1.ChangeRequest {
	t.Helper()
	sha := fixture.Commit(msg, "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	name := sluicev1.ChangeRequestName(release, sha, 1)
	cr, ok := changeRequests(t, ns)[name]
	require.True(t, ok, "no ChangeRequest %s after %q", name, msg)
	assert.Equal(t, sha, cr.Spec.Revision)
	return cr
}

// TestSync_helmRiskIsRatedAgainstTheAppliedRevision: through the real git
// server and the real validator, each push is rated against the release
// rendered at its last applied revision (DESIGN.md §4, issue 12): a
// replicas-only change is low, a new object medium, a new Role high. The
// syncer restarts midway, so the applied revision is rendered from the git
// cache as well as taken from what the syncer remembers.
func TestSync_helmRiskIsRatedAgainstTheAppliedRevision(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	srv := gittest.StartHTTP(t, root, gitUser, gitPassword)
	basicAuthSecret(t, ns, "git", gitUser, gitPassword)
	first := startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", srv.RepoURL("infra"), func(r *sluicev1.Repository) {
		r.Spec.SecretRef = &sluicev1.LocalObjectReference{Name: "git"}
	})
	initial := fixture.Head("main")
	waitHandled(t, repo, requestReconcile(t, repo))
	installName := sluicev1.ChangeRequestName("alpha-staging", initial, 1)
	install := changeRequests(t, ns)[installName]
	assert.Equal(t, sluicev1.RiskMedium, install.Spec.Verdict.Risk, "a first install: every object is new")
	setApplied(t, ns, "alpha-staging", installName, initial)

	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"1.0.0\"\nreplicaCount: 3\n")
	scaled := pushAndGet(t, fixture, repo, ns, "alpha-staging", "alpha: three replicas")
	assert.Equal(t, sluicev1.RiskLow, scaled.Spec.Verdict.Risk, "replicas only: %+v", scaled.Spec.Verdict)
	assert.Equal(t, sluicev1.VerdictPass, scaled.Spec.Verdict.Result, "%+v", scaled.Spec.Verdict.Findings)
	assert.Equal(t, initial, scaled.Spec.PreviousRevision)
	setApplied(t, ns, "alpha-staging", scaled.Name, scaled.Spec.Revision)

	// A new syncer remembers nothing: it renders the applied revision
	// from its git cache.
	first.stop()
	startSyncer(t, ns, first.dataDir)
	fixture.WriteFile("charts/service/templates/extra-configmap.yaml", extraConfigMap)
	added := pushAndGet(t, fixture, repo, ns, "alpha-staging", "chart: an extra ConfigMap")
	assert.Equal(t, sluicev1.RiskMedium, added.Spec.Verdict.Risk, "a new object: %+v", added.Spec.Verdict)
	setApplied(t, ns, "alpha-staging", added.Name, added.Spec.Revision)

	fixture.WriteFile("charts/service/templates/role.yaml", readerRole)
	rbac := pushAndGet(t, fixture, repo, ns, "alpha-staging", "chart: a Role")
	assert.Equal(t, sluicev1.RiskHigh, rbac.Spec.Verdict.Risk, "a new Role: %+v", rbac.Spec.Verdict)
	// beta shares the chart and was never applied: every object is new.
	beta := changeRequests(t, ns)[sluicev1.ChangeRequestName("beta-staging", rbac.Spec.Revision, 1)]
	assert.Equal(t, sluicev1.RiskHigh, beta.Spec.Verdict.Risk)
}

// TestSync_anUnappliedRoleFollowedByAnImageBumpIsStillHighRisk is the
// two-push attack of issue 12: a Role is pushed (high risk, it waits for a
// person), then the same plus an image bump. Rated against the last synced
// revision the second push looked like an image bump (low, auto-approved,
// and the Role with it); rated against what is applied (nothing) it is
// still high.
func TestSync_anUnappliedRoleFollowedByAnImageBumpIsStillHighRisk(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))

	fixture.WriteFile("charts/service/templates/role.yaml", readerRole)
	rbac := pushAndGet(t, fixture, repo, ns, "alpha-staging", "chart: a Role")
	require.Equal(t, sluicev1.RiskHigh, rbac.Spec.Verdict.Risk, "a new Role: %+v", rbac.Spec.Verdict)

	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"1.0.1\"\n")
	bump := pushAndGet(t, fixture, repo, ns, "alpha-staging", "alpha: 1.0.1")
	assert.Equal(t, sluicev1.RiskHigh, bump.Spec.Verdict.Risk, "the Role is still not live: %+v", bump.Spec.Verdict)
}

// setApplied records, as the operator would, that change cr of release was
// applied at rev; it may be called again for a later change.
func setApplied(t *testing.T, ns, release, cr, rev string) {
	t.Helper()
	ctx := context.Background()
	c := &sluicev1.ChangeRequest{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKey{Namespace: ns, Name: cr}, c))
	c.Status.Phase = sluicev1.PhaseApplied
	require.NoError(t, k8s.Status().Update(ctx, c))
	rel := getRelease(t, ns, release)
	rel.Status.AppliedChange, rel.Status.AppliedRevision, rel.Status.AppliedDigest = cr, rev, c.Spec.ApprovalDigest
	meta.SetStatusCondition(&rel.Status.Conditions, metav1.Condition{Type: sluicev1.ConditionReady, Status: metav1.ConditionTrue,
		Reason: sluicev1.ReasonSucceeded, Message: "applied"})
	require.NoError(t, k8s.Status().Update(ctx, rel))
}

// TestSync_aPreviousRevisionThatDoesNotRenderRatesTheChangeHigh: when the
// previous revision cannot be rendered, removed objects cannot be seen; the
// change still gets its ChangeRequest, rated high with a finding saying why.
func TestSync_aPreviousRevisionThatDoesNotRenderRatesTheChangeHigh(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))

	fixture.WriteFile("charts/service/templates/broken.yaml", "{{ .Values.nope.deeper }}\n")
	broken := pushAndGet(t, fixture, repo, ns, "alpha-staging", "chart: a broken template")
	assert.Equal(t, sluicev1.VerdictFail, broken.Spec.Verdict.Result)
	// As if it had been applied by other means (a revision rendered with
	// an older validator, say): the base of the next change.
	setApplied(t, ns, "alpha-staging", broken.Name, broken.Spec.Revision)

	fixture.Remove("charts/service/templates/broken.yaml")
	fixed := pushAndGet(t, fixture, repo, ns, "alpha-staging", "chart: fix the template")
	assert.Equal(t, sluicev1.RiskHigh, fixed.Spec.Verdict.Risk)
	assert.NotEmpty(t, fixed.Spec.ManifestDigest)
	var finding *sluicev1.Finding
	for i, f := range fixed.Spec.Verdict.Findings {
		if f.Policy == "helm.previous_manifest" {
			finding = &fixed.Spec.Verdict.Findings[i]
		}
	}
	require.NotNil(t, finding, "findings: %+v", fixed.Spec.Verdict.Findings)
	t.Log(finding.Message)
	assert.Equal(t, sluicev1.SeverityWarn, finding.Severity)
	assert.True(t, strings.Contains(finding.Message, broken.Spec.Revision[:10]) && strings.Contains(finding.Message, "could not be rendered"), finding.Message)
}
