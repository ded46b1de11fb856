package controller_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const (
	gitUser     = "syncer"
	gitPassword = "correct-horse-battery"
)

func basicAuthSecret(t *testing.T, ns, name, user, password string) {
	t.Helper()
	require.NoError(t, k8s.Create(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Data:       map[string][]byte{"username": []byte(user), "password": []byte(password)},
	}))
}

func TestSync_pushCreatesChangeRequestsForChangedReleasesOnly(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	srv := gittest.StartHTTP(t, root, gitUser, gitPassword)
	basicAuthSecret(t, ns, "git", gitUser, gitPassword)
	s := startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", srv.RepoURL("infra"), func(r *sluicev1.Repository) {
		r.Spec.SecretRef = &sluicev1.LocalObjectReference{Name: "git"}
	})

	first := fixture.Head("main")
	got := waitHandled(t, repo, requestReconcile(t, repo))
	assert.Equal(t, first, got.Status.LastSyncedCommit)
	crs := changeRequests(t, ns)
	require.Len(t, crs, 2, "one ChangeRequest per release")
	alphaCR := crs[sluicev1.ChangeRequestName("alpha-staging", first, 1)]
	require.NotEmpty(t, alphaCR.Name)
	assert.Equal(t, sluicev1.VerdictPass, alphaCR.Spec.Verdict.Result, "%+v", alphaCR.Spec.Verdict)
	assert.NotEmpty(t, alphaCR.Spec.ManifestDigest)
	assert.Empty(t, alphaCR.Spec.PlanDigest)
	assert.Equal(t, alphaCR.ExpectedApprovalDigest(), alphaCR.Spec.ApprovalDigest)
	bundle, err := policy.BundleDigest(policy.Options{})
	require.NoError(t, err)
	assert.Equal(t, sluicev1.Digest(bundle), alphaCR.Spec.PolicyBundleDigest, "the change records the policy bundle its verdict came from")
	assert.Equal(t, []sluicev1.Identity{"email:alice@example.com"}, alphaCR.Spec.Authors)
	assert.Equal(t, "initial catalog", alphaCR.Spec.CommitMessage)
	assert.Equal(t, "alpha-staging", alphaCR.Spec.TargetNamespace)
	assert.EqualValues(t, 1, alphaCR.Spec.Rule.Required)
	assert.Equal(t, "alpha-staging", metav1.GetControllerOf(&alphaCR).Name)

	rel := getRelease(t, ns, "alpha-staging")
	assert.Equal(t, "Repository", metav1.GetControllerOf(rel).Kind)
	assert.Equal(t, first, rel.Status.LastSyncedCommit)
	assert.Equal(t, alphaCR.Name, rel.Status.LatestChange)
	assert.True(t, strings.HasPrefix(rel.Status.LastSyncedTree, "sha256:"))
	synced := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionSynced)
	require.NotNil(t, synced, "the syncer writes Synced")
	assert.Equal(t, metav1.ConditionTrue, synced.Status)
	assert.Equal(t, sluicev1.ReasonSucceeded, synced.Reason)
	assert.Contains(t, synced.Message, alphaCR.Name)
	assert.Equal(t, rel.Generation, synced.ObservedGeneration)

	// The operator's conditions share the list: the syncer keeps them.
	rel.Status.Conditions = append(rel.Status.Conditions, metav1.Condition{
		Type: sluicev1.ConditionReady, Status: metav1.ConditionFalse, Reason: sluicev1.ReasonAwaitingApprovals, Message: "as the operator writes it", LastTransitionTime: metav1.Now(),
	})
	require.NoError(t, k8s.Status().Update(context.Background(), rel))

	// The artifact downloads with the recorded sha256, and its content digest
	// is the recorded one.
	body, sum := download(t, alphaCR.Spec.Artifact.URL)
	assert.Equal(t, string(alphaCR.Spec.Artifact.SHA256), sum)
	assert.Equal(t, string(alphaCR.Spec.Artifact.SHA256), artifact.Digest(body))
	content, err := artifact.ContentDigestOfTarGz(body)
	require.NoError(t, err)
	assert.Equal(t, string(alphaCR.Spec.ContentDigest), content)
	assert.True(t, strings.HasPrefix(alphaCR.Spec.Artifact.URL, s.ArtifactURL))

	// Unchanged: any number of reconciles fetch nothing.
	fetches := s.Git.Stats().Fetches
	packs := srv.UploadPacks()
	for range 3 {
		waitHandled(t, repo, requestReconcile(t, repo))
	}
	assert.Equal(t, fetches, s.Git.Stats().Fetches, "an unchanged repository must not be fetched")
	assert.Equal(t, packs, srv.UploadPacks())
	assert.Len(t, changeRequests(t, ns), 2)

	// A change to one service's values: only its release.
	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"1.0.1\"\nreplicaCount: 1\n")
	second := fixture.Commit("alpha 1.0.1", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	require.Len(t, crs, 3)
	alpha2 := crs[sluicev1.ChangeRequestName("alpha-staging", second, 1)]
	require.NotEmpty(t, alpha2.Name, "alpha changed")
	assert.Equal(t, first, alpha2.Spec.PreviousRevision)
	assert.Equal(t, []sluicev1.Identity{"email:bob@example.com"}, alpha2.Spec.Authors)
	assert.NotEqual(t, alphaCR.Spec.ContentDigest, alpha2.Spec.ContentDigest)
	assert.EqualValues(t, 1, s.Git.Stats().Fetches-fetches, "one incremental fetch")
	rel = getRelease(t, ns, "alpha-staging")
	synced = meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionSynced)
	require.NotNil(t, synced)
	assert.Contains(t, synced.Message, alpha2.Name, "Synced follows the newest change")
	ready := meta.FindStatusCondition(rel.Status.Conditions, sluicev1.ConditionReady)
	require.NotNil(t, ready, "the operator's condition is kept")
	assert.Equal(t, "as the operator writes it", ready.Message)

	// A change to the shared chart: every release using it.
	fixture.WriteFile("charts/service/templates/configmap.yaml", mustRead(t, filepath.Join(chartDir, "templates", "configmap.yaml"))+"# shared change\n")
	third := fixture.Commit("chart tweak", "carol@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	crs = changeRequests(t, ns)
	require.Len(t, crs, 5)
	assert.Contains(t, crs, sluicev1.ChangeRequestName("alpha-staging", third, 1))
	assert.Contains(t, crs, sluicev1.ChangeRequestName("beta-staging", third, 1))
	waitReady(t, repo, metav1.ConditionTrue, sluicev1.ReasonSucceeded)

	// The sluice_* metrics recorded the work.
	families, err := crmetrics.Registry.Gather()
	require.NoError(t, err)
	seen := map[string]bool{}
	for _, f := range families {
		seen[f.GetName()] = true
	}
	for _, name := range []string{"sluice_git_ls_remote_duration_seconds", "sluice_git_fetch_duration_seconds", "sluice_changerequests_created_total", "sluice_validation_duration_seconds"} {
		assert.True(t, seen[name], name)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func TestSync_crashAfterChangeRequestLeavesNoDuplicateAfterRestart(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	head := fixture.Head("main")
	var crashes atomic.Int32
	first := startSyncer(t, ns, "", func(s *syncer.Syncer) {
		s.Reconciler.Hooks.AfterChangeRequestCreated = func(cr *sluicev1.ChangeRequest) error {
			crashes.Add(1)
			return errors.New("simulated crash")
		}
	})
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	require.Eventually(t, func() bool { return len(changeRequests(t, ns)) == 2 }, timeout, tick)
	first.stop()
	require.Positive(t, crashes.Load())
	rel := getRelease(t, ns, "alpha-staging")
	assert.Empty(t, rel.Status.LastSyncedTree, "the crash came before the Release status")

	// The restarted syncer (new process, same data) finishes the job.
	startSyncer(t, ns, first.dataDir)
	got := waitHandled(t, repo, requestReconcile(t, repo))
	assert.Equal(t, head, got.Status.LastSyncedCommit)
	crs := changeRequests(t, ns)
	assert.Len(t, crs, 2, "no duplicate ChangeRequest")
	for _, name := range []string{"alpha-staging", "beta-staging"} {
		rel := getRelease(t, ns, name)
		assert.Equal(t, sluicev1.ChangeRequestName(name, head, 1), rel.Status.LatestChange)
		assert.NotEmpty(t, rel.Status.LastSyncedTree)
	}
}

func TestSync_forcePushIsComparedByTreesNeverRolledBack(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	c1 := fixture.Head("main")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))

	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"2.0.0\"\nreplicaCount: 1\n")
	c2 := fixture.Commit("alpha 2.0.0", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	require.Len(t, changeRequests(t, ns), 3)

	// Force-push: main goes back to c1 plus a commit changing beta only.
	fixture.SetBranch("main", c1)
	fixture.WriteFile("services/beta/values.yaml", "image:\n  repository: ghcr.io/example/beta\n  tag: \"1.1.0\"\nreplicaCount: 1\n")
	c3 := fixture.Commit("beta 1.1.0", "mallory@example.com")
	got := waitHandled(t, repo, requestReconcile(t, repo))
	assert.Equal(t, c3, got.Status.LastSyncedCommit)
	cond := waitReady(t, repo, metav1.ConditionTrue, sluicev1.ReasonHistoryRewritten)
	assert.Contains(t, cond.Message, "history rewritten")
	assert.Contains(t, cond.Message, c2[:10])

	crs := changeRequests(t, ns)
	// alpha's inputs differ from what was last synced (c2), so the new head
	// is a new change of alpha, at c3, never a return to the old SHA.
	assert.Contains(t, crs, sluicev1.ChangeRequestName("alpha-staging", c3, 1))
	assert.Contains(t, crs, sluicev1.ChangeRequestName("beta-staging", c3, 1))
	assert.Len(t, crs, 5)
	assert.Equal(t, c3, getRelease(t, ns, "alpha-staging").Status.LastSyncedCommit)

	var events corev1.EventList
	require.Eventually(t, func() bool {
		_ = k8s.List(context.Background(), &events, client.InNamespace(ns))
		for _, e := range events.Items {
			if e.Reason == sluicev1.ReasonHistoryRewritten {
				return true
			}
		}
		return false
	}, timeout, tick, "a HistoryRewritten event")
}

// The releases of one push are synced side by side: the first release to
// create its ChangeRequest holds its pass until the other release's
// ChangeRequest exists, which a pass syncing one release after the other
// never reaches (the hook then gives up and the pass fails). Both changes
// are then recorded in full.
func TestSync_releasesOfOnePushAreSyncedSideBySide(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	head := fixture.Head("main")
	var mu sync.Mutex
	arrived := map[string]bool{}
	var once sync.Once
	both := make(chan struct{})
	var sideBySide atomic.Bool
	startSyncer(t, ns, "", func(s *syncer.Syncer) {
		s.Reconciler.Hooks.AfterChangeRequestCreated = func(cr *sluicev1.ChangeRequest) error {
			if cr.Spec.Revision != head {
				return nil
			}
			mu.Lock()
			arrived[cr.Name] = true
			if len(arrived) == 2 {
				once.Do(func() { close(both) })
			}
			mu.Unlock()
			select {
			case <-both:
				sideBySide.Store(true)
				return nil
			case <-time.After(timeout):
				return errors.New("the other release's ChangeRequest did not come while this one waited")
			}
		}
	})
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	got := waitHandled(t, repo, requestReconcile(t, repo))
	require.True(t, sideBySide.Load(), "both releases were in flight at once")
	assert.Equal(t, head, got.Status.LastSyncedCommit)
	for _, name := range []string{"alpha-staging", "beta-staging"} {
		rel := getRelease(t, ns, name)
		assert.Equal(t, sluicev1.ChangeRequestName(name, head, 1), rel.Status.LatestChange)
		assert.NotEmpty(t, rel.Status.LastSyncedTree)
	}
	assert.Len(t, changeRequests(t, ns), 2, "one ChangeRequest per release, none twice")
	waitReady(t, repo, metav1.ConditionTrue, sluicev1.ReasonSucceeded)
}
