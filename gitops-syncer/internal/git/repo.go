package git

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"path"
	"sort"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Repo is a read-only view of a local cache.
type Repo struct {
	c *cache
}

// HasCommit reports whether the cache holds commit sha.
func (r *Repo) HasCommit(sha string) bool {
	if !plumbing.IsHash(sha) {
		return false
	}
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	_, err := r.c.repo.CommitObject(plumbing.NewHash(sha))
	return err == nil
}

func (r *Repo) commit(sha string) (*object.Commit, error) {
	if !plumbing.IsHash(sha) {
		return nil, &Error{Reason: ReasonNotFound, Message: fmt.Sprintf("%q is not a commit hash", sha)}
	}
	c, err := r.c.repo.CommitObject(plumbing.NewHash(sha))
	if err != nil {
		return nil, &Error{Reason: ReasonNotFound, Message: fmt.Sprintf("commit %s is not in the local cache", sluicev1.ShortSHA(sha))}
	}
	return c, nil
}

// rootTree returns commit sha and its root tree, the start of every read
// of a commit's files. The caller holds the cache's lock.
func (r *Repo) rootTree(sha string) (*object.Commit, *object.Tree, error) {
	c, err := r.commit(sha)
	if err != nil {
		return nil, nil, err
	}
	tree, err := c.Tree()
	if err != nil {
		return nil, nil, fmt.Errorf("read tree of %s: %w", sluicev1.ShortSHA(sha), err)
	}
	return c, tree, nil
}

// CommitInfo is what a ChangeRequest records of a commit.
type CommitInfo struct {
	Hash           string
	Message        string
	AuthorEmail    string
	CommitterEmail string
}

// Commit returns the message and identities of commit sha.
func (r *Repo) Commit(sha string) (CommitInfo, error) {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	c, err := r.commit(sha)
	if err != nil {
		return CommitInfo{}, err
	}
	return CommitInfo{Hash: c.Hash.String(), Message: c.Message, AuthorEmail: c.Author.Email, CommitterEmail: c.Committer.Email}, nil
}

// IsAncestor reports whether ancestor is reachable from descendant (a commit
// is its own ancestor). A missing ancestor is not one.
func (r *Repo) IsAncestor(ancestor, descendant string) (bool, error) {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	d, err := r.commit(descendant)
	if err != nil {
		return false, err
	}
	a, err := r.commit(ancestor)
	if err != nil {
		return false, nil
	}
	ok, err := a.IsAncestor(d)
	if err != nil {
		return false, fmt.Errorf("walk history: %w", err)
	}
	return ok, nil
}

// Authors returns the distinct author and committer emails of the commits
// reachable from head but not past base, newest first, walking at most max
// commits. When base is empty or not reached, only head's identities count:
// after a rewritten history the range is unknown, and the head commit is
// certain.
func (r *Repo) Authors(head, base string, max int) ([]string, error) {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	h, err := r.commit(head)
	if err != nil {
		return nil, err
	}
	headOnly := func() []string { return dedupe([]string{h.Author.Email, h.Committer.Email}) }
	if base == "" || base == head {
		if base == head {
			return nil, nil
		}
		return headOnly(), nil
	}
	baseHash := plumbing.NewHash(base)
	seen := map[plumbing.Hash]bool{}
	queue := []*object.Commit{h}
	var emails []string
	reached := false
	for len(queue) > 0 && len(seen) < max {
		c := queue[0]
		queue = queue[1:]
		if seen[c.Hash] {
			continue
		}
		seen[c.Hash] = true
		if c.Hash == baseHash {
			reached = true
			continue
		}
		emails = append(emails, c.Author.Email, c.Committer.Email)
		for _, p := range c.ParentHashes {
			if seen[p] {
				continue
			}
			pc, err := r.c.repo.CommitObject(p)
			if err != nil {
				continue // shallow or missing parent: stop on this branch.
			}
			queue = append(queue, pc)
		}
	}
	if !reached {
		return headOnly(), nil
	}
	return dedupe(emails), nil
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		s = strings.TrimSpace(s)
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}

// InputsHash hashes the git objects at the given repository-relative paths
// of commit sha: "sha256:" + hex of the sorted lines "<path> <mode> <object>"
// ("<path> missing" for absent paths). Only tree objects are read, so it is
// cheap however big the inputs are, and equal inputs give equal hashes at
// any commit.
func (r *Repo) InputsHash(sha string, paths []string) (string, error) {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	_, tree, err := r.rootTree(sha)
	if err != nil {
		return "", err
	}
	clean := make([]string, 0, len(paths))
	seen := map[string]bool{}
	for _, p := range paths {
		p = cleanRel(p)
		if !seen[p] {
			seen[p] = true
			clean = append(clean, p)
		}
	}
	sort.Strings(clean)
	h := sha256.New()
	for _, p := range clean {
		if p == "." {
			fmt.Fprintf(h, "%s %o %s\n", p, filemode.Dir, tree.Hash)
			continue
		}
		e, err := tree.FindEntry(p)
		if err != nil {
			fmt.Fprintf(h, "%s missing\n", p)
			continue
		}
		fmt.Fprintf(h, "%s %o %s\n", p, e.Mode, e.Hash)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// SubDirs lists the folder names directly under dir at commit sha; a
// missing dir gives none.
func (r *Repo) SubDirs(sha, dir string) ([]string, error) {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	_, tree, err := r.rootTree(sha)
	if err != nil {
		return nil, err
	}
	if d := cleanRel(dir); d != "." {
		tree, err = tree.Tree(d)
		if errors.Is(err, object.ErrDirectoryNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read %s at %s: %w", d, sluicev1.ShortSHA(sha), err)
		}
	}
	var out []string
	for _, e := range tree.Entries {
		if e.Mode == filemode.Dir {
			out = append(out, e.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// FS returns the tree of commit sha as a read-only file system.
func (r *Repo) FS(sha string) (fs.FS, error) {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	c, tree, err := r.rootTree(sha)
	if err != nil {
		return nil, err
	}
	return &treeFS{root: tree, store: r.c.repo.Storer, lock: &r.c.mu, when: c.Committer.When}, nil
}

func cleanRel(p string) string {
	p = path.Clean("/" + strings.TrimSpace(p))
	p = strings.TrimPrefix(p, "/")
	if p == "" {
		return "."
	}
	return p
}

func netipFromIP(ip net.IP) (netip.Addr, bool) {
	return netip.AddrFromSlice(ip)
}

// MergeBase returns a best common ancestor of commits a and b, "" when they
// share no history; of several (criss-cross merges) the smallest hash, so
// the answer is stable. Pull-request previews are computed against it.
func (r *Repo) MergeBase(a, b string) (string, error) {
	r.c.mu.RLock()
	defer r.c.mu.RUnlock()
	ca, err := r.commit(a)
	if err != nil {
		return "", err
	}
	cb, err := r.commit(b)
	if err != nil {
		return "", err
	}
	bases, err := ca.MergeBase(cb)
	if err != nil {
		return "", fmt.Errorf("merge base of %s and %s: %w", sluicev1.ShortSHA(a), sluicev1.ShortSHA(b), err)
	}
	best := ""
	for _, c := range bases {
		if h := c.Hash.String(); best == "" || h < best {
			best = h
		}
	}
	return best, nil
}
