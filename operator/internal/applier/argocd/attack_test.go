package argocd

// Attacks by someone who can push to the repository but approves nothing,
// against a repo-server with two config management plugins: Sluice's and
// another that prints a manifest of its own (argocdtest.OtherPluginName).

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier/appliertest"
	"github.com/sluice-gitops/sluice/operator/internal/applier/argocd/argocdtest"
)

// redirect is what a push writes to the Release (the syncer rewrites its
// spec on every push, before planning): another service folder.
func (f *fixture) redirect(folder sluicev1.RelativePath) {
	f.t.Helper()
	rel := &sluicev1.Release{}
	require.NoError(f.t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(f.release), rel))
	rel.Spec.SourcePath = folder
	require.NoError(f.t, env.Client.Update(context.Background(), rel))
	f.release = rel
}

// without is files less those under prefix: the artifact of an approved
// change holds only what that change packed.
func without(files map[string][]byte, prefix string) map[string][]byte {
	out := map[string][]byte{}
	for n, b := range files {
		if !strings.HasPrefix(n, prefix) {
			out[n] = b
		}
	}
	return out
}

func TestArgoCD_anOverrideNamingAnotherPluginIsRefusedAndNothingOfItLands(t *testing.T) {
	for _, tc := range []struct {
		name string
		// folder holds the pusher's .argocd-source.yaml; redirect, when
		// set, is the folder a later push wrote into the Release.
		folder, redirect string
	}{
		// The attack that worked: the Application's folder came from the
		// Release, which a push rewrote before planning, and the override
		// file there was in no artifact.
		{name: "in a folder a later push wrote into the Release", folder: "services/evil", redirect: "services/evil"},
		// The approved folder at the approved commit holds it, but the
		// artifact (what the change packed) does not: only git shows it.
		{name: "in the approved folder, missing from the artifact", folder: "services/web"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, true)
			override := tc.folder + "/.argocd-source.yaml"
			commit, files := f.push("message: approved\n", map[string]string{
				override:                     "plugin:\n  name: " + argocdtest.OtherPluginName + "\n",
				"services/evil/service.yaml": "not a service\n",
			})
			packed := without(without(files, "services/evil/"), override)
			cr := f.changeFor(commit, packed, f.digestOf(packed))
			if tc.redirect != "" {
				f.redirect(sluicev1.RelativePath(tc.redirect))
			}

			_, err := f.apply(cr)
			fail := appliertest.RequireFailure(t, err, sluicev1.ReasonManifestMismatch)
			require.Contains(t, fail.Message, override)
			require.False(t, f.planted(), "nothing of the other plugin landed")
			require.NotEqual(t, "from the other plugin", f.message())
			require.Empty(t, f.message(), "nothing applied")
			err = env.Client.Get(context.Background(), client.ObjectKey{Namespace: f.ctl, Name: f.release.Name}, newApplication())
			require.True(t, apierrors.IsNotFound(err), "no Application: %v", err)
		})
	}
}

func TestArgoCD_theApplicationsFolderIsTheApprovedChangesNotTheReleases(t *testing.T) {
	f := newFixture(t, true)
	cr := f.change("message: approved\n", map[string]string{"services/evil/service.yaml": "not a service\n"})
	f.redirect("services/evil")

	_, err := f.apply(cr)
	require.NoError(t, err, argo.Logs())
	src := f.application().Object["spec"].(map[string]any)["source"].(map[string]any)
	require.Equal(t, "services/web", src["path"], "the approved change's folder, not the one a later push wrote")
	require.Equal(t, "approved", f.message())
}

// An Application already pinned to the approved commit and synced (a sync
// asked for before a restart, by an earlier version, or by hand) is held
// to the plugin Argo CD really used, not to sourceType Plugin.
func TestArgoCD_aSyncRenderedByAnotherPluginIsNeverApplied(t *testing.T) {
	f := newFixture(t, true)
	ctx := context.Background()
	cr := f.change("message: approved\n", map[string]string{
		"services/web/.argocd-source.yaml": "plugin:\n  name: " + argocdtest.OtherPluginName + "\n",
	})
	rel, err := releaseOf(cr)
	require.NoError(t, err)
	project, err := f.applier.ensureProject(ctx, f.repo)
	require.NoError(t, err)
	require.NoError(t, env.Client.Create(ctx, f.applier.desired(cr, rel, f.repo, project)))
	require.Eventually(t, func() bool {
		app := f.application()
		return readStatus(app).doneFor(cr.Spec.Revision)
	}, 90*time.Second, 200*time.Millisecond, argo.Logs())
	require.True(t, f.planted(), "Argo CD rendered with the other plugin while its status says sourceType Plugin")
	sourceType, _, _ := unstructured.NestedString(f.application().Object, "status", "sourceType")
	require.Equal(t, "Plugin", sourceType)

	_, err = f.apply(cr)
	fail := appliertest.RequireFailure(t, err, sluicev1.ReasonManifestMismatch)
	require.Contains(t, fail.Message, `plugin "other"`)
}

func TestGitReader_reportsWhatArgoCDWouldMergeAndRefusesItAnywhere(t *testing.T) {
	ctx := context.Background()
	repo := func(url string) *sluicev1.Repository {
		return &sluicev1.Repository{Spec: sluicev1.RepositorySpec{URL: url}}
	}
	g := &GitReader{TempDir: t.TempDir()}
	for _, tc := range []struct {
		name    string
		files   map[string]string
		plugin  string
		other   bool
		refused string
	}{
		{name: "clean", files: map[string]string{"svc/a.yaml": "x: 1\n"}, plugin: PluginName},
		{name: "renamed", files: map[string]string{"svc/.argocd-source.yaml": "plugin: {name: other}\n"}, plugin: "other", refused: "svc/.argocd-source.yaml"},
		{name: "per app", files: map[string]string{"svc/.argocd-source-ns_app.yaml": "plugin: {name: other}\n"}, plugin: "other", refused: "svc/.argocd-source-ns_app.yaml"},
		{name: "dropped", files: map[string]string{"svc/.argocd-source.yaml": "plugin: null\ndirectory: {recurse: true}\n"}, other: true, refused: "svc/.argocd-source.yaml"},
		{name: "helm added", files: map[string]string{"svc/.argocd-source.yaml": "helm: {releaseName: x}\n"}, plugin: PluginName, other: true, refused: "svc/.argocd-source.yaml"},
		{name: "elsewhere", files: map[string]string{"other/.argocd-source.yaml": "plugin: {name: other}\n"}, plugin: PluginName, refused: "other/.argocd-source.yaml"},
		{name: "env only", files: map[string]string{"svc/.argocd-source.yaml": "plugin: {env: [{name: A, value: b}]}\n"}, plugin: PluginName, refused: "svc/.argocd-source.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := argocdtest.NewGitRepo(t)
			files := map[string][]byte{}
			for n, c := range tc.files {
				files[n] = []byte(c)
			}
			rev := r.Commit(files)
			rep, err := g.Inspect(ctx, repo(r.URL), rev, "svc", []string{"ns_app"})
			require.NoError(t, err)
			require.Equal(t, tc.plugin, rep.Plugin)
			require.Equal(t, tc.other, rep.OtherRenderer)
			if tc.refused == "" {
				require.Empty(t, rep.Refused)
				require.NoError(t, rep.Err(rev))
				return
			}
			require.Contains(t, rep.Refused, tc.refused)
			require.ErrorIs(t, rep.Err(rev), ErrOverride)
		})
	}

	t.Run("submodule", func(t *testing.T) {
		r := argocdtest.NewGitRepo(t)
		rev := r.Commit(map[string][]byte{"svc/a.yaml": []byte("x: 1\n")})
		// A gitlink: Argo CD's checkout initialises it, and its files are
		// in no tree of this repository.
		r.Git("update-index", "--add", "--cacheinfo", "160000,"+rev+",svc/sub")
		r.Git("commit", "-q", "-m", "submodule")
		rev = r.Git("rev-parse", "HEAD")
		rep, err := g.Inspect(ctx, repo(r.URL), rev, "svc", nil)
		require.NoError(t, err)
		require.Contains(t, rep.Refused, "svc/sub (a submodule)")
	})

	t.Run("unknown commit", func(t *testing.T) {
		r := argocdtest.NewGitRepo(t)
		r.Commit(map[string][]byte{"a": []byte("a")})
		_, err := g.Inspect(ctx, repo(r.URL), strings.Repeat("ab", 20), "svc", nil)
		require.ErrorContains(t, err, "commit abababab")
	})
}

func TestReleaseOf_theReleaseIsTheChangesControllerNeverItsSpec(t *testing.T) {
	owned := func(kind, name string, controller bool) *sluicev1.ChangeRequest {
		return &sluicev1.ChangeRequest{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ctl", Name: "c", OwnerReferences: []metav1.OwnerReference{{
				APIVersion: sluicev1.GroupVersion.String(), Kind: kind, Name: name, UID: "u1", Controller: ptr.To(controller)}}},
			Spec: sluicev1.ChangeRequestSpec{Release: "web-prod"},
		}
	}
	rel, err := releaseOf(owned("Release", "web-prod", true))
	require.NoError(t, err)
	require.Equal(t, releaseRef{Namespace: "ctl", Name: "web-prod", UID: "u1"}, rel)
	for _, cr := range []*sluicev1.ChangeRequest{
		owned("Release", "other", true), owned("Repository", "web-prod", true), owned("Release", "web-prod", false), {Spec: sluicev1.ChangeRequestSpec{Release: "web-prod"}},
	} {
		_, err := releaseOf(cr)
		appliertest.RequireFailure(t, err, sluicev1.ReasonInvalidSpec)
	}
}
