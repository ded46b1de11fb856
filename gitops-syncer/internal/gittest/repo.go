// Package gittest runs real git servers for tests and benchmarks: a smart
// HTTP server (git http-backend behind net/http/cgi with basic auth), an
// in-process SSH server that execs git-upload-pack after checking the
// client's key, and file:// URLs. Fixture repositories are bare
// repositories with a separate worktree, committed to with go-git, so a
// "push" is a commit and a force-push is moving a ref.
package gittest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/storage/filesystem"
)

// TB is the part of testing.TB the fixtures need.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	TempDir() string
	Cleanup(func())
}

// Repo is a served repository: a bare git dir under a server root plus a
// worktree to edit and commit.
type Repo struct {
	t      TB
	Name   string
	GitDir string
	Work   string
	repo   *gogit.Repository
	clock  time.Time
}

// NewRepo creates the bare repository root/<name>.git with branch main and
// an empty worktree.
func NewRepo(t TB, root, name string) *Repo {
	t.Helper()
	gitDir := filepath.Join(root, name+".git")
	work := t.TempDir()
	st := filesystem.NewStorage(osfs.New(gitDir), cache.NewObjectLRUDefault())
	repo, err := gogit.InitWithOptions(st, osfs.New(work), gogit.InitOptions{DefaultBranch: plumbing.Main})
	if err != nil {
		t.Fatalf("init %s: %v", name, err)
	}
	// A bare repository for git http-backend and git-upload-pack.
	cfg, err := repo.Config()
	if err != nil {
		t.Fatalf("config %s: %v", name, err)
	}
	cfg.Core.IsBare = true
	cfg.Core.Worktree = ""
	if err := repo.SetConfig(cfg); err != nil {
		t.Fatalf("config %s: %v", name, err)
	}
	return &Repo{t: t, Name: name, GitDir: gitDir, Work: work, repo: repo, clock: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
}

// WriteFile writes a file of the worktree, creating folders.
func (r *Repo) WriteFile(path, content string) {
	r.t.Helper()
	full := filepath.Join(r.Work, filepath.FromSlash(path))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		r.t.Fatalf("mkdir: %v", err)
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		r.t.Fatalf("write %s: %v", path, err)
	}
}

// Remove deletes a file or folder of the worktree.
func (r *Repo) Remove(path string) {
	r.t.Helper()
	if err := os.RemoveAll(filepath.Join(r.Work, filepath.FromSlash(path))); err != nil {
		r.t.Fatalf("remove %s: %v", path, err)
	}
}

// CopyDir copies the folder src (on disk) to path in the worktree.
func (r *Repo) CopyDir(src, path string) {
	r.t.Helper()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(r.Work, filepath.FromSlash(path), rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		r.t.Fatalf("copy %s: %v", src, err)
	}
}

// Commit stages everything in the worktree and commits it on the current
// branch as author email; it returns the commit hash. Commit times advance
// by a second per commit, so hashes are reproducible.
func (r *Repo) Commit(msg, email string) string {
	r.t.Helper()
	wt, err := r.repo.Worktree()
	if err != nil {
		r.t.Fatalf("worktree: %v", err)
	}
	if err := wt.AddWithOptions(&gogit.AddOptions{All: true}); err != nil {
		r.t.Fatalf("add: %v", err)
	}
	r.clock = r.clock.Add(time.Second)
	sig := &object.Signature{Name: email, Email: email, When: r.clock}
	h, err := wt.Commit(msg, &gogit.CommitOptions{All: true, Author: sig, Committer: sig, AllowEmptyCommits: true})
	if err != nil {
		r.t.Fatalf("commit: %v", err)
	}
	return h.String()
}

// Head returns the commit of branch.
func (r *Repo) Head(branch string) string {
	r.t.Helper()
	ref, err := r.repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		r.t.Fatalf("ref %s: %v", branch, err)
	}
	return ref.Hash().String()
}

// SetBranch points branch at sha, as a force-push would, and checks the
// worktree out there.
func (r *Repo) SetBranch(branch, sha string) {
	r.t.Helper()
	name := plumbing.NewBranchReferenceName(branch)
	if err := r.repo.Storer.SetReference(plumbing.NewHashReference(name, plumbing.NewHash(sha))); err != nil {
		r.t.Fatalf("set %s: %v", branch, err)
	}
	wt, err := r.repo.Worktree()
	if err != nil {
		r.t.Fatalf("worktree: %v", err)
	}
	if err := wt.Checkout(&gogit.CheckoutOptions{Branch: name, Force: true}); err != nil {
		r.t.Fatalf("checkout %s: %v", branch, err)
	}
}

// Tag creates the annotated tag name on sha.
func (r *Repo) Tag(name, sha string) {
	r.t.Helper()
	sig := &object.Signature{Name: "tagger", Email: "tagger@example.com", When: r.clock}
	if _, err := r.repo.CreateTag(name, plumbing.NewHash(sha), &gogit.CreateTagOptions{Tagger: sig, Message: name}); err != nil {
		r.t.Fatalf("tag %s: %v", name, err)
	}
}

// DeleteBranch removes branch from the served repository.
func (r *Repo) DeleteBranch(branch string) {
	r.t.Helper()
	if err := r.repo.Storer.RemoveReference(plumbing.NewBranchReferenceName(branch)); err != nil {
		r.t.Fatalf("delete %s: %v", branch, err)
	}
}

// FileURL is the file:// URL of the repository.
func (r *Repo) FileURL() string { return "file://" + filepath.ToSlash(r.GitDir) }

// String names the repository in test output.
func (r *Repo) String() string { return fmt.Sprintf("gittest.Repo(%s)", r.Name) }
