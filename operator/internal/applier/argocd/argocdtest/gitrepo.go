package argocdtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// GitRepo is a real git repository Argo CD clones over file://.
type GitRepo struct {
	t   testing.TB
	Dir string
	URL string
}

// NewGitRepo makes an empty repository with a main branch in a temporary
// folder of t.
func NewGitRepo(t testing.TB) *GitRepo {
	t.Helper()
	g := &GitRepo{t: t, Dir: t.TempDir()}
	g.URL = "file://" + g.Dir
	g.Git("init", "-q", "-b", "main")
	return g
}

// Git runs git in the repository and returns its trimmed output.
func (g *GitRepo) Git(args ...string) string {
	g.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = g.Dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=Pusher", "GIT_AUTHOR_EMAIL=pusher@example.com",
		"GIT_COMMITTER_NAME=Pusher", "GIT_COMMITTER_EMAIL=pusher@example.com", "GIT_CONFIG_GLOBAL=/dev/null")
	out, err := cmd.CombinedOutput()
	if err != nil {
		g.t.Fatalf("git %v: %v: %s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit replaces the worktree with files, commits, and returns the commit.
func (g *GitRepo) Commit(files map[string][]byte) string {
	g.t.Helper()
	entries, err := os.ReadDir(g.Dir)
	if err != nil {
		g.t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != ".git" {
			if err := os.RemoveAll(filepath.Join(g.Dir, e.Name())); err != nil {
				g.t.Fatal(err)
			}
		}
	}
	for n, b := range files {
		p := filepath.Join(g.Dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			g.t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			g.t.Fatal(err)
		}
	}
	g.Git("add", "-A")
	g.Git("commit", "-q", "--allow-empty", "-m", "push")
	return g.Git("rev-parse", "HEAD")
}
