package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestSync_badManifestRejectsKnownReleasesAndReportsUnknownOnes(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))

	// alpha's manifest breaks; a new service gamma arrives broken too.
	fixture.WriteFile("services/alpha/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: alpha\nchart: {path: charts/service}\nenvironments:\n  - name: staging\n    namespace: alpha-staging\n    colour: blue\n")
	fixture.WriteFile("services/gamma/service.yaml", "kind: Nope\n")
	head := fixture.Commit("break things", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))

	crs := changeRequests(t, ns)
	rejected, ok := crs[sluicev1.ChangeRequestName("alpha-staging", head, 1)]
	require.True(t, ok, "a rejected ChangeRequest for the known release")
	assert.Equal(t, sluicev1.VerdictFail, rejected.Spec.Verdict.Result)
	require.NotEmpty(t, rejected.Spec.Verdict.Findings)
	assert.Equal(t, sluicev1.SeverityDeny, rejected.Spec.Verdict.Findings[0].Severity)
	assert.Equal(t, "services/alpha/service.yaml", rejected.Spec.Verdict.Findings[0].File)
	assert.Contains(t, fmt.Sprint(rejected.Spec.Verdict.Findings), "colour")
	assert.NotContains(t, crs, sluicev1.ChangeRequestName("beta-staging", head, 1), "beta did not change")

	cond := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonManifestInvalid)
	assert.Contains(t, cond.Message, "services/gamma/service.yaml")
}

func TestSync_failingRenderIsARejectedChangeRequest(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	// The chart's values schema refuses the mutable tag "latest".
	fixture.WriteFile("services/beta/values.yaml", "image:\n  repository: ghcr.io/example/beta\n  tag: latest\nreplicaCount: 1\n")
	// (A chart from a chart repository that cannot be had proposes
	// nothing: TestSync_aChartThatCannotBeHadProposesNothingAndLeavesTheOthers.)
	head := fixture.Commit("beta latest", "bob@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))
	crs := changeRequests(t, ns)
	beta := crs[sluicev1.ChangeRequestName("beta-staging", head, 1)]
	require.NotEmpty(t, beta.Name)
	assert.Equal(t, sluicev1.VerdictFail, beta.Spec.Verdict.Result, "%+v", beta.Spec.Verdict)
	assert.Equal(t, sluicev1.VerdictPass, crs[sluicev1.ChangeRequestName("alpha-staging", head, 1)].Spec.Verdict.Result, "one failing service holds back no other")
}

func TestSync_removedServiceIsProposedForDeletionOnlyWhenAllowed(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))

	fixture.Remove("services/beta")
	fixture.Commit("retire beta", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	cond := waitReady(t, repo, metav1.ConditionTrue, sluicev1.ReasonServiceRemoved)
	assert.Contains(t, cond.Message, "beta-staging")
	getRelease(t, ns, "beta-staging") // kept

	current := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKeyFromObject(repo), current))
	current.Spec.Prune = true
	require.NoError(t, k8s.Update(context.Background(), current))
	// With prune on, the removal is proposed as a Delete change; nothing
	// is deleted before it is approved.
	require.Eventually(t, func() bool {
		for _, cr := range changeRequests(t, ns) {
			if cr.Spec.Release == "beta-staging" && cr.IsDelete() {
				return true
			}
		}
		return false
	}, timeout, tick, "a Delete change for beta-staging")
	err := k8s.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: "beta-staging"}, &sluicev1.Release{})
	require.False(t, apierrors.IsNotFound(err), "the Release is kept until the Delete is applied")
	getRelease(t, ns, "alpha-staging")
}

func TestSync_replanAnnotationMakesTheNextAttempt(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	head := fixture.Head("main")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))

	for i, want := range []string{"-r2", "-r3"} {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"attempt-%d"}}}`, sluicev1.AnnotationReplan, i)
		require.NoError(t, k8s.Patch(context.Background(), getRelease(t, ns, "alpha-staging"), client.RawPatch(types.MergePatchType, []byte(patch))))
		name := sluicev1.ChangeRequestName("alpha-staging", head, 1) + want
		require.Eventually(t, func() bool {
			return getRelease(t, ns, "alpha-staging").Status.LatestChange == name
		}, timeout, tick, "re-plan %s", want)
		cr := changeRequests(t, ns)[name]
		assert.EqualValues(t, i+2, cr.Spec.Attempt)
	}
	// Nothing else moves: beta keeps one ChangeRequest, alpha has three.
	waitHandled(t, repo, requestReconcile(t, repo))
	count := map[string]int{}
	for _, cr := range changeRequests(t, ns) {
		count[cr.Spec.Release]++
	}
	assert.Equal(t, map[string]int{"alpha-staging": 3, "beta-staging": 1}, count)
}

func TestSync_releaseOfAnotherRepositoryIsNeverTakenOver(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	other := newRepository(t, ns, "other", "https://git.example.com/other.git", func(r *sluicev1.Repository) { r.Spec.Suspend = true })
	taken := &sluicev1.Release{
		ObjectMeta: metav1.ObjectMeta{Name: "alpha-staging", Namespace: ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: sluicev1.GroupVersion.String(), Kind: "Repository", Name: other.Name, UID: other.UID, Controller: ptrTo(true),
		}}},
		Spec: sluicev1.ReleaseSpec{Repository: "other", Service: "alpha", Environment: "staging", SourcePath: "services/alpha", TargetNamespace: "alpha-staging", Chart: sluicev1.ChartSource{Path: "charts/service"}},
	}
	require.NoError(t, k8s.Create(context.Background(), taken))
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))
	cond := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonOwnershipConflict)
	assert.Contains(t, cond.Message, "alpha-staging")
	got := getRelease(t, ns, "alpha-staging")
	assert.Equal(t, "other", got.Spec.Repository)
	assert.Equal(t, other.UID, metav1.GetControllerOf(got).UID)
	for name := range changeRequests(t, ns) {
		assert.False(t, strings.HasPrefix(name, "alpha-staging-"), name)
	}
	assert.Contains(t, changeRequests(t, ns), sluicev1.ChangeRequestName("beta-staging", fixture.Head("main"), 1))
}

func ptrTo[T any](v T) *T { return &v }
