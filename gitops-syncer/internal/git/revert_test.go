package git_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
)

// gitCLI runs the git command line in dir and returns its trimmed output.
func gitCLI(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "user.name=t", "-c", "user.email=t@example.com"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(cmd.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %v: %s", args, out)
	return strings.TrimSpace(string(out))
}

// TestRevert_undoesOneCommitOnTheBranchHeadAsGitRevertDoes reverts a
// commit that changed, added and deleted files, onto a later head: the
// tree is the one `git revert` makes; a revert whose paths changed since
// is refused with the paths; the branch is pushed, and only a sluice/
// branch.
func TestRevert_undoesOneCommitOnTheBranchHeadAsGitRevertDoes(t *testing.T) {
	root := t.TempDir()
	repo := seed(t, root)
	repo.WriteFile("services/checkout/values.yaml", "replicas: 2\n")
	repo.WriteFile("services/checkout/extra/config.yaml", "a: b\n")
	repo.Remove("services/cart/values.yaml")
	failed := repo.Commit("checkout: two replicas", "mallory@example.com")
	repo.WriteFile("charts/service/Chart.yaml", "name: service\nversion: 2\n")
	head := repo.Commit("chart: version 2", "alice@example.com")

	c := newClient(t, true)
	remote := git.Remote{Key: "ns/infra", URL: repo.FileURL()}
	ctx := context.Background()
	cache, err := c.Fetch(ctx, remote, "refs/heads/main", head)
	require.NoError(t, err)
	sig := object.Signature{Name: "Sluice", Email: "sluice@example.com", When: time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)}
	rev, err := cache.Revert(failed, head, sig, "Revert checkout\n")
	require.NoError(t, err)

	// The same tree as git's own revert of the commit on the same head.
	clone := t.TempDir()
	gitCLI(t, clone, "clone", "-q", repo.GitDir, ".")
	gitCLI(t, clone, "revert", "--no-edit", failed)
	want := gitCLI(t, clone, "rev-parse", "HEAD^{tree}")

	require.NoError(t, c.Push(ctx, remote, rev, "sluice/revert-checkout"))
	assert.Equal(t, rev, repo.Head("sluice/revert-checkout"))
	gitCLI(t, clone, "fetch", "-q", "origin", "sluice/revert-checkout")
	assert.Equal(t, want, gitCLI(t, clone, "rev-parse", "FETCH_HEAD^{tree}"), "the revert's tree is git revert's")
	assert.Equal(t, head, gitCLI(t, clone, "rev-parse", "FETCH_HEAD^"), "on top of the head")
	assert.Equal(t, "replicas: 1", gitCLI(t, clone, "show", "FETCH_HEAD:services/checkout/values.yaml"))
	assert.Equal(t, repo.Head("main"), head, "the tracked branch is untouched")

	// Pushed again (a restart that rebuilt it): the branch is overwritten.
	sig.When = sig.When.Add(time.Hour)
	again, err := cache.Revert(failed, head, sig, "Revert checkout\n")
	require.NoError(t, err)
	require.NoError(t, c.Push(ctx, remote, again, "sluice/revert-checkout"))
	assert.Equal(t, again, repo.Head("sluice/revert-checkout"))

	// Only Sluice's own branches.
	err = c.Push(ctx, remote, rev, "main")
	require.Error(t, err)
	assert.Contains(t, err.Error(), `refusing to push to branch "main"`)
	assert.Equal(t, head, repo.Head("main"))

	// A later commit changed a path of the failed one: refused, naming it.
	repo.WriteFile("services/checkout/values.yaml", "replicas: 3\n")
	later := repo.Commit("checkout: three", "alice@example.com")
	cache, err = c.Fetch(ctx, remote, "refs/heads/main", later)
	require.NoError(t, err)
	_, err = cache.Revert(failed, later, sig, "Revert checkout\n")
	var conflict *git.ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Contains(t, err.Error(), "does not apply to "+later[:10])
	assert.Contains(t, err.Error(), "changed since: services/checkout/values.yaml")
}

// TestRevert_ofAMergeCommitUndoesWhatItBroughtIn reverts a merge
// commit against its first parent, as `git revert -m 1` does.
func TestRevert_ofAMergeCommitUndoesWhatItBroughtIn(t *testing.T) {
	root := t.TempDir()
	repo := seed(t, root)
	base := repo.Head("main")
	clone := t.TempDir()
	gitCLI(t, clone, "clone", "-q", repo.GitDir, ".")
	gitCLI(t, clone, "checkout", "-q", "-b", "feature")
	gitCLI(t, clone, "rm", "-q", "services/cart/values.yaml")
	gitCLI(t, clone, "commit", "-qm", "drop cart")
	gitCLI(t, clone, "checkout", "-q", "main")
	require.NoError(t, exec.Command("sh", "-c", "printf 'name: checkout\\nowner: x\\n' > "+clone+"/services/checkout/service.yaml").Run())
	gitCLI(t, clone, "commit", "-qam", "owner")
	gitCLI(t, clone, "merge", "-q", "--no-ff", "--no-edit", "feature")
	gitCLI(t, clone, "push", "-q", "origin", "main")
	merge := gitCLI(t, clone, "rev-parse", "HEAD")
	require.NotEqual(t, base, merge)

	c := newClient(t, true)
	remote := git.Remote{Key: "ns/infra", URL: repo.FileURL()}
	cache, err := c.Fetch(context.Background(), remote, "refs/heads/main", merge)
	require.NoError(t, err)
	rev, err := cache.Revert(merge, merge, object.Signature{Name: "Sluice", Email: "s@example.com"}, "Revert the merge\n")
	require.NoError(t, err)
	require.NoError(t, c.Push(context.Background(), remote, rev, "sluice/revert-merge"))
	gitCLI(t, clone, "revert", "--no-edit", "-m", "1", "HEAD")
	gitCLI(t, clone, "fetch", "-q", "origin", "sluice/revert-merge")
	assert.Equal(t, gitCLI(t, clone, "rev-parse", "HEAD^{tree}"), gitCLI(t, clone, "rev-parse", "FETCH_HEAD^{tree}"))
}
