package catalog

import (
	"io/fs"
	"maps"
	"os"
	"slices"
	"sync"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
)

// Cache remembers, per owner (a Repository), the services Discover found in
// the last tree it was asked about, under the digest of that tree's
// skeleton and the services path: everything Discover reads
// (changespec.SkeletonDigest). A commit that changes only what the manifest
// parser does not read (values, templates, other files' content) gets the
// same entries without the skeleton being written to disk again; any
// change to a folder, a name, a symlink, a manifest, a kustomization or a
// Terraform file is a new digest and a new Discover. It is safe for
// concurrent use; it holds one tree's entries per owner.
type Cache struct {
	mu   sync.Mutex
	last map[string]cachedEntries
	hits int64
}

type cachedEntries struct {
	key     string
	entries []Entry
}

// Discover is Discover for owner, answered from the cache when fsys has the
// skeleton digest of the owner's last tree. On a miss it writes the
// skeleton in a new folder under scratchDir named prefix… and removes it
// after. Errors are never cached.
func (c *Cache) Discover(owner string, fsys fs.FS, servicesPath, scratchDir, prefix string) ([]Entry, error) {
	digest, err := changespec.SkeletonDigest(fsys)
	if err != nil {
		digest = "" // Discover says what is wrong with the tree
	}
	key := digest + "\x00" + servicesPath
	if digest != "" {
		c.mu.Lock()
		got, ok := c.last[owner]
		if ok && got.key == key {
			c.hits++
		}
		c.mu.Unlock()
		if ok && got.key == key {
			return cloneEntries(got.entries), nil
		}
	}
	scratch, err := os.MkdirTemp(scratchDir, prefix)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	entries, err := Discover(fsys, servicesPath, scratch)
	if err != nil || digest == "" {
		return entries, err
	}
	c.mu.Lock()
	if c.last == nil {
		c.last = map[string]cachedEntries{}
	}
	c.last[owner] = cachedEntries{key: key, entries: cloneEntries(entries)}
	c.mu.Unlock()
	return entries, nil
}

// Forget drops what the cache holds for the owners match selects (those
// of a deleted Repository).
func (c *Cache) Forget(match func(owner string) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	maps.DeleteFunc(c.last, func(owner string, _ cachedEntries) bool { return match(owner) })
}

// Hits counts the answers given from the cache.
func (c *Cache) Hits() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hits
}

// cloneEntries copies entries so that a caller changing its slices or maps
// cannot change what the cache holds. The parsed manifests are shared:
// nothing changes a Service after Discover.
func cloneEntries(in []Entry) []Entry {
	if in == nil {
		return nil
	}
	out := make([]Entry, len(in))
	for i, e := range in {
		e.Inputs = slices.Clone(e.Inputs)
		if e.Releases != nil {
			rels := maps.Clone(e.Releases)
			for k, r := range rels {
				r.Paths = slices.Clone(r.Paths)
				rels[k] = r
			}
			e.Releases = rels
		}
		out[i] = e
	}
	return out
}
