package preview_test

import (
	"context"
	"fmt"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/go-git/go-billy/v5/osfs"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/controller"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/preview"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider/providertest"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

var (
	env       *testenv.Env
	k8s       client.Client
	validator validation.Validator
	root      string
)

func TestMain(m *testing.M) { testenv.Main(m, testenv.Options{}, setup) }

// setup finds this repository and starts the validator the tests share.
func setup(e *testenv.Env) error {
	env, k8s = e, e.Client
	_, file, _, _ := runtime.Caller(0)
	root = filepath.Join(filepath.Dir(file), "..", "..", "..")
	var err error
	validator, err = validation.NewLibrary(context.Background(), validation.LibraryOptions{})
	return err
}

func newNamespace(t *testing.T) string { return env.Namespace(t, "pv-") }

// infra is a served infra repository with the golden-path chart and the
// Helm-only sample service "cart", and a Repository for it.
type infra struct {
	git  *gittest.Repo
	repo *sluicev1.Repository
	base string
	h    *preview.Handler
}

func newInfra(t *testing.T, previews sluicev1.PreviewPolicy) *infra {
	t.Helper()
	ns := newNamespace(t)
	g := gittest.NewRepo(t, t.TempDir(), "infra")
	g.CopyDir(filepath.Join(root, "charts", "service"), "charts/service")
	g.CopyDir(filepath.Join(root, "services", "cart"), "services/cart")
	base := g.Commit("cart", "platform@example.com")
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "infra"}, Spec: sluicev1.RepositorySpec{
		URL: g.FileURL(), TargetNamespaces: []string{"cart-*"}, ServiceAccountName: "deployer", Previews: previews,
	}}
	require.NoError(t, k8s.Create(context.Background(), repo))
	gc, err := git.NewGoGit(t.TempDir(), git.URLPolicy{AllowFile: true}, nil)
	require.NoError(t, err)
	h := &preview.Handler{
		Client:          k8s,
		Git:             gc,
		Remotes:         &controller.RepositoryReconciler{Client: k8s, APIReader: k8s},
		Validator:       validator,
		Store:           &artifact.Store{Dir: t.TempDir()},
		ArtifactBaseURL: "http://artifacts.test",
		ScratchDir:      t.TempDir(),
		Log:             logr.Discard(),
	}
	return &infra{git: g, repo: repo, base: base, h: h}
}

// pullRequest commits the files on top of from as a pull request head,
// points refs/pull/<n>/head at it and puts main back where it was.
func (i *infra) pullRequest(t *testing.T, n int64, from string, files map[string]string) string {
	t.Helper()
	main := i.git.Head("main")
	i.git.SetBranch("main", from)
	for p, c := range files {
		i.git.WriteFile(p, c)
	}
	head := i.git.Commit(fmt.Sprintf("pull request %d", n), "alice@example.com")
	i.setRef(t, fmt.Sprintf("refs/pull/%d/head", n), head)
	i.git.SetBranch("main", main)
	return head
}

func (i *infra) setRef(t *testing.T, name, sha string) {
	st := filesystem.NewStorage(osfs.New(i.git.GitDir), cache.NewObjectLRUDefault())
	require.NoError(t, st.SetReference(plumbing.NewHashReference(plumbing.ReferenceName(name), plumbing.NewHash(sha))))
}

// githubPR is the octokit pull_request example retargeted at this
// repository's main branch, head and base.
func githubPR(t *testing.T, action string, n int64, head, base string) *provider.Event {
	t.Helper()
	body := providertest.Edit(t, providertest.Payload(t, "github/pull_request.opened.payload.json"), func(m map[string]any) {
		m["action"], m["number"] = action, n
		pr := m["pull_request"].(map[string]any)
		pr["number"] = n
		pr["head"].(map[string]any)["sha"] = head
		pr["base"].(map[string]any)["sha"] = base
		pr["base"].(map[string]any)["ref"] = "main"
	})
	ev, err := provider.ParseGitHub("pull_request", "d-"+action+head, body)
	require.NoError(t, err)
	return ev
}

// githubReview is the octokit review example as a review of commit by
// login with the given state and author association.
func githubReview(t *testing.T, n, id int64, state, commit, head, login, association string) *provider.Event {
	t.Helper()
	fix, action := "github/pull_request_review.submitted.payload.json", "submitted"
	if state == "dismissed" {
		fix, action = "github/pull_request_review.dismissed.payload.json", "dismissed"
	}
	body := providertest.Edit(t, providertest.Payload(t, fix), func(m map[string]any) {
		m["action"] = action
		r := m["review"].(map[string]any)
		r["id"], r["state"], r["commit_id"], r["author_association"] = id, state, commit, association
		r["user"].(map[string]any)["login"] = login
		pr := m["pull_request"].(map[string]any)
		pr["number"] = n
		pr["head"].(map[string]any)["sha"] = head
		pr["base"].(map[string]any)["ref"] = "main"
	})
	ev, err := provider.ParseGitHub("pull_request_review", fmt.Sprintf("r-%d-%s", id, state), body)
	require.NoError(t, err)
	return ev
}

func previews(t *testing.T, ns string, n int64) []sluicev1.ChangeRequest {
	var list sluicev1.ChangeRequestList
	require.NoError(t, k8s.List(context.Background(), &list, client.InNamespace(ns), client.MatchingLabels{
		sluicev1.LabelPreview: "true", sluicev1.LabelPullRequest: fmt.Sprint(n)}))
	return list.Items
}

func approvals(t *testing.T, ns string) []sluicev1.Approval {
	var list sluicev1.ApprovalList
	require.NoError(t, k8s.List(context.Background(), &list, client.InNamespace(ns)))
	return list.Items
}
