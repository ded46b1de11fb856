package git

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	gogit "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Reverts: the syncer's only writes to a repository. A revert commit is
// made in the local cache and pushed to a branch of Sluice's own; the
// tracked branch changes only when a person merges the pull request.

// ConflictError says a revert does not apply cleanly: a path the reverted
// commit changed is no longer as that commit left it.
type ConflictError struct{ Msg string }

func (e *ConflictError) Error() string { return e.Msg }

// entry is one non-tree entry of a flattened tree.
type entry struct {
	mode filemode.FileMode
	hash plumbing.Hash
}

// Revert writes into the cache a commit on top of onto that undoes the
// changes commit made to its first parent (for a merge commit, what the
// merge brought into the mainline: `git revert -m 1`), and returns it.
// Each path the commit changed must be in onto exactly as the commit left
// it; otherwise it returns a *ConflictError naming the paths, and writes
// nothing a ref points at. The commit is dated at and signed by sig.
func (r *Repo) Revert(commit, onto string, sig object.Signature, message string) (string, error) {
	r.c.mu.Lock()
	defer r.c.mu.Unlock()
	c, cTree, err := r.rootTree(commit)
	if err != nil {
		return "", err
	}
	if c.NumParents() == 0 {
		return "", &ConflictError{Msg: fmt.Sprintf("commit %s has no parent to return to", sluicev1.ShortSHA(commit))}
	}
	parent, err := c.Parent(0)
	if err != nil {
		return "", fmt.Errorf("read the parent of %s: %w", sluicev1.ShortSHA(commit), err)
	}
	pTree, err := parent.Tree()
	if err != nil {
		return "", fmt.Errorf("read tree of %s: %w", sluicev1.ShortSHA(parent.Hash.String()), err)
	}
	_, oTree, err := r.rootTree(onto)
	if err != nil {
		return "", err
	}
	changes, err := object.DiffTree(pTree, cTree)
	if err != nil {
		return "", fmt.Errorf("diff %s against its parent: %w", sluicev1.ShortSHA(commit), err)
	}
	if len(changes) == 0 {
		return "", &ConflictError{Msg: fmt.Sprintf("commit %s changes no file", sluicev1.ShortSHA(commit))}
	}
	files, err := flatten(oTree)
	if err != nil {
		return "", err
	}
	var conflicts []string
	for _, ch := range changes {
		p := ch.To.Name
		if p == "" {
			p = ch.From.Name
		}
		now, present := files[p]
		left, leftPresent := ch.To.TreeEntry, ch.To.Name != ""
		if present != leftPresent || (present && (now.hash != left.Hash || now.mode != left.Mode)) {
			conflicts = append(conflicts, p)
			continue
		}
		if ch.From.Name == "" {
			delete(files, p)
		} else {
			files[p] = entry{mode: ch.From.TreeEntry.Mode, hash: ch.From.TreeEntry.Hash}
		}
	}
	if len(conflicts) > 0 {
		sort.Strings(conflicts)
		return "", &ConflictError{Msg: fmt.Sprintf("the revert of %s does not apply to %s: changed since: %s",
			sluicev1.ShortSHA(commit), sluicev1.ShortSHA(onto), strings.Join(conflicts, ", "))}
	}
	tree, err := r.writeTree(files)
	if err != nil {
		return "", err
	}
	out := &object.Commit{Author: sig, Committer: sig, Message: message, TreeHash: tree, ParentHashes: []plumbing.Hash{plumbing.NewHash(onto)}}
	obj := r.c.repo.Storer.NewEncodedObject()
	if err := out.Encode(obj); err != nil {
		return "", fmt.Errorf("encode the revert commit: %w", err)
	}
	h, err := r.c.repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return "", fmt.Errorf("store the revert commit: %w", err)
	}
	return h.String(), nil
}

// flatten lists every entry of t that is not a tree (files, symlinks,
// submodules) by its path.
func flatten(t *object.Tree) (map[string]entry, error) {
	out := map[string]entry{}
	w := object.NewTreeWalker(t, true, nil)
	defer w.Close()
	for {
		name, e, err := w.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("walk tree: %w", err)
		}
		if e.Mode == filemode.Dir {
			continue
		}
		out[name] = entry{mode: e.Mode, hash: e.Hash}
	}
}

// writeTree stores the trees of files (path → entry) and returns the root.
func (r *Repo) writeTree(files map[string]entry) (plumbing.Hash, error) {
	dirs := map[string][]object.TreeEntry{"": nil}
	for p, e := range files {
		dir, name := path.Split(p)
		dir = strings.TrimSuffix(dir, "/")
		dirs[dir] = append(dirs[dir], object.TreeEntry{Name: name, Mode: e.mode, Hash: e.hash})
		for d := parentDir(dir); dir != ""; d = parentDir(d) {
			if _, ok := dirs[d]; !ok {
				dirs[d] = nil
			}
			if d == "" {
				break
			}
		}
	}
	var write func(dir string) (plumbing.Hash, error)
	write = func(dir string) (plumbing.Hash, error) {
		entries := append([]object.TreeEntry(nil), dirs[dir]...)
		for d := range dirs {
			if d == "" || d == dir {
				continue
			}
			if parentDir(d) != dir {
				continue
			}
			h, err := write(d)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			entries = append(entries, object.TreeEntry{Name: path.Base(d), Mode: filemode.Dir, Hash: h})
		}
		// Git orders a tree's entries by name, a folder's as if it ended
		// in "/".
		key := func(e object.TreeEntry) string {
			if e.Mode == filemode.Dir {
				return e.Name + "/"
			}
			return e.Name
		}
		sort.Slice(entries, func(i, j int) bool { return key(entries[i]) < key(entries[j]) })
		t := &object.Tree{Entries: entries}
		obj := r.c.repo.Storer.NewEncodedObject()
		if err := t.Encode(obj); err != nil {
			return plumbing.ZeroHash, fmt.Errorf("encode tree %q: %w", dir, err)
		}
		return r.c.repo.Storer.SetEncodedObject(obj)
	}
	return write("")
}

// parentDir is the folder holding d ("" for the root's).
func parentDir(d string) string {
	if p := path.Dir(d); p != "." {
		return p
	}
	return ""
}

// Push sets branch of the remote to sha, a commit of the local cache,
// with auth (a provider token as a password: the Repository's own
// credentials may only read). It overwrites the branch: callers push only
// to branches of Sluice's own.
func (g *GoGit) Push(ctx context.Context, r Remote, sha, branch string) (err error) {
	if !plumbing.IsHash(sha) {
		return &Error{Reason: ReasonNotFound, Message: fmt.Sprintf("%q is not a commit hash", sha)}
	}
	dst := plumbing.NewBranchReferenceName(branch)
	if err := dst.Validate(); err != nil || !strings.HasPrefix(branch, "sluice/") {
		return &Error{Reason: ReasonURL, Message: fmt.Sprintf("refusing to push to branch %q (only sluice/… branches)", branch)}
	}
	ep, err := g.policy.Check(ctx, r.URL)
	if err != nil {
		return err
	}
	auth, err := r.Auth.authMethod(ep, filepath.Join(g.dir, ".ssh"))
	if err != nil {
		return err
	}
	c, err := g.cacheFor(r, false)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, timeoutOf(r))
	defer cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	start := time.Now()
	defer func() { g.observe("push", start, err) }()
	local := plumbing.ReferenceName("refs/sluice/push/" + branch)
	if err := c.repo.Storer.SetReference(plumbing.NewHashReference(local, plumbing.NewHash(sha))); err != nil {
		return fmt.Errorf("set %s: %w", local, err)
	}
	defer func() { _ = c.repo.Storer.RemoveReference(local) }()
	err = c.repo.PushContext(ctx, &gogit.PushOptions{
		RemoteName: "origin",
		RemoteURL:  r.URL,
		RefSpecs:   []config.RefSpec{config.RefSpec("+" + local.String() + ":" + dst.String())},
		Auth:       auth,
	})
	if err == nil || errors.Is(err, gogit.NoErrAlreadyUpToDate) {
		return nil
	}
	return wrapError(ctx, "push to", r.URL, err, r.Auth.secrets())
}
