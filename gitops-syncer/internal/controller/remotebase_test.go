package controller_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/ssh"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
		r.Spec.KustomizeRemoteBases = []sluicev1.KustomizeRemoteBase{{URL: platform.FileURL()}}
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
		r.Spec.KustomizeRemoteBases = []sluicev1.KustomizeRemoteBase{{URL: platform.FileURL()}}
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

// TestSync_aPrivateRemoteBaseIsFetchedWithItsEntrysCredentialsOnly: a
// remote base from a repository that needs credentials (a real SSH git
// server accepting one key) is fetched with the Secret of the
// spec.kustomizeRemoteBases entry allowing it, and with nothing else:
// without a secretRef, or with another key, the release proposes nothing
// and says why (ChartUnavailable), and a second allowed base on another
// server is not fetched with the first entry's key. The Secret's key and
// passphrase appear in no condition, finding or log line.
func TestSync_aPrivateRemoteBaseIsFetchedWithItsEntrysCredentialsOnly(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	root := t.TempDir()
	platform := gittest.NewRepo(t, root, "platform")
	platform.WriteFile("web/kustomization.yaml", "resources: [config.yaml]\n")
	platform.WriteFile("web/config.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: web\ndata:\n  color: private\n")
	pinned := platform.Commit("bases", "platform@example.com")
	srv := gittest.StartSSH(t, root)
	otherRoot := t.TempDir()
	shared := gittest.NewRepo(t, otherRoot, "shared")
	shared.WriteFile("cm/kustomization.yaml", "resources: [cm.yaml]\n")
	shared.WriteFile("cm/cm.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\n")
	sharedPinned := shared.Commit("shared", "platform@example.com")
	otherSrv := gittest.StartSSH(t, otherRoot)

	// The accepted key, encrypted with a passphrase, and a key the server
	// does not accept.
	const passphrase = "passphrase-of-the-remote-base-key"
	raw, err := ssh.ParseRawPrivateKey(srv.ClientKeyPEM)
	require.NoError(t, err)
	block, err := ssh.MarshalPrivateKeyWithPassphrase(raw, "", []byte(passphrase))
	require.NoError(t, err)
	identity := pem.EncodeToMemory(block)
	stranger, _ := gittest.NewKeyPEM(t)
	for name, data := range map[string]map[string][]byte{
		"platform-git": {"identity": identity, "identityPassphrase": []byte(passphrase), "known_hosts": srv.KnownHosts()},
		"stranger":     {"identity": stranger, "known_hosts": srv.KnownHosts()},
	} {
		require.NoError(t, k8s.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: data}))
	}
	keyLine := strings.Split(string(identity), "\n")[1] // a line of the encrypted key's body

	fixture := gittest.NewRepo(t, t.TempDir(), "infra")
	sourcesService(fixture, "resources:\n  - "+srv.RepoURL("platform")+"//web?ref="+pinned+"\n  - "+otherSrv.RepoURL("shared")+"//cm?ref="+sharedPinned+"\n")
	both := fixture.Commit("a private base and a shared one", "alice@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL(), func(r *sluicev1.Repository) {
		r.Spec.KustomizeRemoteBases = []sluicev1.KustomizeRemoteBase{{URL: srv.RepoURL("platform")}}
	})
	cond := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonChartUnavailable)
	assert.Contains(t, cond.Message, "needs a Secret", "no secretRef: the base is not fetched")

	// unavailable is the Ready message while it says ChartUnavailable.
	unavailable := func() string {
		got := &sluicev1.Repository{}
		if k8s.Get(ctx, client.ObjectKeyFromObject(repo), got) != nil {
			return ""
		}
		c := meta.FindStatusCondition(got.Status.Conditions, sluicev1.ConditionReady)
		if c == nil || c.Reason != sluicev1.ReasonChartUnavailable {
			return ""
		}
		return c.Message
	}
	setEntries := func(entries ...sluicev1.KustomizeRemoteBase) {
		t.Helper()
		// A merge patch: the syncer writes the Repository too.
		patch, err := json.Marshal(map[string]any{"spec": map[string]any{"kustomizeRemoteBases": entries}})
		require.NoError(t, err)
		require.NoError(t, k8s.Patch(ctx, repo.DeepCopy(), client.RawPatch("application/merge-patch+json", patch)))
	}
	// A key the server does not accept.
	setEntries(sluicev1.KustomizeRemoteBase{URL: srv.RepoURL("platform"), SecretRef: &sluicev1.LocalObjectReference{Name: "stranger"}})
	if !assert.Eventually(t, func() bool {
		return strings.Contains(unavailable(), "authentication failed")
	}, 2*time.Minute, 100*time.Millisecond) {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, ns) {
				t.Log(l)
			}
		}
		t.FailNow()
	}

	// The right key for the private base; the shared base's entry has
	// none, and the private base's key is not tried there.
	setEntries(sluicev1.KustomizeRemoteBase{URL: srv.RepoURL("platform"), SecretRef: &sluicev1.LocalObjectReference{Name: "platform-git"}},
		sluicev1.KustomizeRemoteBase{URL: otherSrv.RepoURL("shared")})
	require.Eventually(t, func() bool {
		m := unavailable()
		return strings.Contains(m, otherSrv.Addr+"/shared.git") && strings.Contains(m, "needs a Secret")
	}, 2*time.Minute, 100*time.Millisecond, "%+v", cond)
	assert.NotContains(t, changeRequests(t, ns), sluicev1.ChangeRequestName("shop-staging", both, 1))

	// Only the private base: fetched with its key into the artifact.
	fixture.WriteFile("services/shop/overlays/staging/kustomization.yaml", "resources:\n  - "+srv.RepoURL("platform")+"//web?ref="+pinned+"\n")
	head := fixture.Commit("the private base only", "alice@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	cr, ok := changeRequests(t, ns)[sluicev1.ChangeRequestName("shop-staging", head, 1)]
	require.True(t, ok, "a change with the private base")
	require.NotEqual(t, sluicev1.VerdictFail, cr.Spec.Verdict.Result, "%+v", cr.Spec.Verdict.Findings)
	rb, err := manifest.ParseRemoteBase(srv.RepoURL("platform") + "//web?ref=" + pinned)
	require.NoError(t, err)
	assert.Contains(t, string(artifactFiles(t, cr)[rb.Root()+"/web/config.yaml"]), "color: private")

	// The credentials are nowhere a person or a pusher reads.
	got := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(repo), got))
	var seen strings.Builder
	fmt.Fprintf(&seen, "%+v\n%s\n", got.Status, logs.String())
	for _, c := range changeRequests(t, ns) {
		fmt.Fprintf(&seen, "%+v\n", c.Spec)
	}
	for _, secret := range []string{passphrase, keyLine, strings.Split(string(stranger), "\n")[1]} {
		assert.NotContains(t, seen.String(), secret)
	}
}
