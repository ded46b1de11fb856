package controller_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func findingSays(fs []sluicev1.Finding, file, text string) bool {
	for _, f := range fs {
		if f.Severity == sluicev1.SeverityDeny && (file == "" || f.File == file) && strings.Contains(f.Message, text) {
			return true
		}
	}
	return false
}

// TestSync_aRemoteBaseTheRepositoryDoesNotFetchFailsWithFileAndLine: an
// overlay naming a remote base pinned to a commit builds nothing the
// syncer did not fetch (and it fetches none yet): the change fails with
// the kustomization's file; one on a branch says it must be pinned; a
// repository that writes the fetched-bases folder itself, to pass its own
// files off as another repository's commit, is refused.
func TestSync_aRemoteBaseTheRepositoryDoesNotFetchFailsWithFileAndLine(t *testing.T) {
	ns := newNamespace(t)
	const commit = "0123456789abcdef0123456789abcdef01234567"
	url := "https://git.example/platform/bases.git//web?ref=" + commit
	const k = "services/shop/overlays/staging/kustomization.yaml"
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	sourcesService(fixture, "resources:\n  - "+url+"\n")
	first := fixture.Commit("a remote base", "mallory@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))
	cr := changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", first, 1)]
	require.Equal(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result)
	require.True(t, findingSays(cr.Spec.Verdict.Findings, k, "it is not fetched"), "%+v", cr.Spec.Verdict.Findings)

	fixture.WriteFile(k, "resources:\n  - https://git.example/platform/bases.git//web?ref=main\n")
	second := fixture.Commit("a branch", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	cr = changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", second, 1)]
	require.Equal(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result)
	require.True(t, findingSays(cr.Spec.Verdict.Findings, k, "pinned to a full commit id"), "%+v", cr.Spec.Verdict.Findings)

	rb, err := manifest.ParseRemoteBase(url)
	require.NoError(t, err)
	fixture.WriteFile(k, "resources:\n  - "+url+"\n")
	fixture.WriteFile(rb.Target()+"/kustomization.yaml", "resources: [cm.yaml]\n")
	fixture.WriteFile(rb.Target()+"/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: not-from-there\n")
	third := fixture.Commit("a forged fetched base", "mallory@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	cr = changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", third, 1)]
	require.Equal(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result)
	require.True(t, findingSays(cr.Spec.Verdict.Findings, "", "a folder Sluice keeps for fetched remote bases"), "%+v", cr.Spec.Verdict.Findings)
}

// TestSync_anAllowedRemoteBaseIsFetchedAtItsCommitIntoTheArtifact: a
// Repository allowing a platform repository's bases gets the overlay's
// remote base fetched at its pinned commit into the artifact (so it is in
// the contentDigest) and validated from there; a later push to that
// repository's branch changes nothing approved.
func TestSync_anAllowedRemoteBaseIsFetchedAtItsCommitIntoTheArtifact(t *testing.T) {
	ns := newNamespace(t)
	platform := gittest.NewRepo(t, t.TempDir(), "platform")
	platform.WriteFile("web/kustomization.yaml", "resources: [config.yaml, ../common]\n")
	platform.WriteFile("web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: pinned\n")
	platform.WriteFile("common/kustomization.yaml", "resources: [cm.yaml]\n")
	platform.WriteFile("common/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: common\ndata:\n  a: b\n")
	pinned := platform.Commit("bases", "platform@example.com")
	platform.WriteFile("web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: moved\n")
	platform.Commit("moved on", "platform@example.com")

	url := platform.FileURL() + "//web?ref=" + pinned
	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	sourcesService(fixture, "resources:\n  - "+url+"\nnamePrefix: staging-\n")
	first := fixture.Commit("a pinned remote base", "alice@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL(), func(r *sluicev1.Repository) {
		r.Spec.KustomizeRemoteBases = []string{platform.FileURL()}
	})
	waitHandled(t, repo, requestReconcile(t, repo))
	cr, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", first, 1)]
	require.True(t, ok)
	require.NotEqual(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result, "%+v", cr.Spec.Verdict.Findings)
	require.NotEmpty(t, cr.Spec.ManifestDigest, "the overlay built from the fetched base")
	rb, err := manifest.ParseRemoteBase(url)
	require.NoError(t, err)
	files := artifactFiles(t, cr)
	require.Contains(t, string(files[rb.Root()+"/web/config.yaml"]), "color: pinned", "the base at its pinned commit, not the branch head")
	require.Contains(t, files, rb.Root()+"/common/cm.yaml", "what the base reads elsewhere in its repository")
}

// TestArtifacts_aLostArtifactWithARemoteBaseIsRebuiltFromItsPinnedCommit:
// a syncer that lost the artifact of a change whose overlay has an allowed
// remote base (a new data folder) rebuilds it byte for byte from git and
// the base's pinned commit, though that repository's branch moved on.
func TestArtifacts_aLostArtifactWithARemoteBaseIsRebuiltFromItsPinnedCommit(t *testing.T) {
	ns := newNamespace(t)
	platform := gittest.NewRepo(t, t.TempDir(), "platform")
	platform.WriteFile("web/kustomization.yaml", "resources: [config.yaml]\n")
	platform.WriteFile("web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: pinned\n")
	pinned := platform.Commit("bases", "platform@example.com")

	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	sourcesService(fixture, "resources:\n  - "+platform.FileURL()+"//web?ref="+pinned+"\nnamePrefix: staging-\n")
	head := fixture.Commit("a pinned remote base", "alice@example.com")
	first := startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL(), func(r *sluicev1.Repository) {
		r.Spec.KustomizeRemoteBases = []string{platform.FileURL()}
	})
	waitHandled(t, repo, requestReconcile(t, repo))
	cr, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", head, 1)]
	require.True(t, ok)
	require.NotEqual(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result, "%+v", cr.Spec.Verdict.Findings)
	before, sum := download(t, cr.Spec.Artifact.URL)

	platform.WriteFile("web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: moved\n")
	platform.Commit("moved on", "platform@example.com")
	first.stop()
	second := startSyncer(t, ns, "")
	after, sum2 := download(t, second.ArtifactURL+strings.TrimPrefix(cr.Spec.Artifact.URL, first.ArtifactURL))
	assert.Equal(t, sum, sum2)
	assert.Equal(t, before, after, "the rebuilt artifact carries the base at its pinned commit")
}
