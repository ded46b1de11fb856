package changespec

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// wantContent says which files the manifest parser reads.
func wantContent(name string) bool {
	base := path.Base(name)
	return base == manifest.FileName || strings.HasSuffix(base, ".tf") || strings.HasSuffix(base, ".tf.json") ||
		slices.Contains(manifest.KustomizationFiles, base)
}

// skeletonNode is one thing a skeleton holds: a folder, a symlink (with
// its target as written) or a file (with its content when the manifest
// parser reads it, empty otherwise).
type skeletonNode struct {
	name   string // slash-separated, relative to the root
	kind   byte   // 'd' folder, 'l' symlink, 'f' file
	target string
	data   []byte
}

// walkSkeleton visits what a skeleton of fsys holds, in WalkDir's lexical
// order. WriteSkeleton writes exactly that and SkeletonDigest hashes
// exactly that, so the digest names what a skeleton's reader can see.
func walkSkeleton(fsys fs.FS, visit func(n skeletonNode) error) error {
	return fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return visit(skeletonNode{name: name, kind: 'd'})
		case d.Type()&fs.ModeSymlink != 0:
			target, err := fs.ReadLink(fsys, name)
			if err != nil {
				return err
			}
			return visit(skeletonNode{name: name, kind: 'l', target: target})
		case !d.Type().IsRegular():
			return nil
		}
		var data []byte
		if wantContent(name) {
			if data, err = fs.ReadFile(fsys, name); err != nil {
				return err
			}
		}
		return visit(skeletonNode{name: name, kind: 'f', data: data})
	})
}

// WriteSkeleton writes the folders, symlinks and parser-relevant files of
// fsys under dst. Symlinks are written last, so nothing is written through
// one; a symlink's target is written as is and the parser's own
// confinement checks judge it.
func WriteSkeleton(fsys fs.FS, dst string) error {
	type link struct{ name, target string }
	var links []link
	err := walkSkeleton(fsys, func(n skeletonNode) error {
		out := filepath.Join(dst, filepath.FromSlash(n.name))
		switch n.kind {
		case 'd':
			return os.MkdirAll(out, 0o755)
		case 'l':
			links = append(links, link{name: out, target: n.target})
			return nil
		}
		return os.WriteFile(out, n.data, 0o644)
	})
	if err != nil {
		return err
	}
	sort.Slice(links, func(i, j int) bool { return links[i].name < links[j].name })
	for _, l := range links {
		if err := os.Symlink(l.target, l.name); err != nil {
			return err
		}
	}
	return nil
}

// SkeletonDigest is a SHA-256 digest of the skeleton WriteSkeleton would
// write for fsys: every folder, symlink (and target) and file name, and the
// content of the files the manifest parser reads. Two trees with the same
// digest give any reader of their skeletons the same answers; it is
// computed from the tree alone, without writing anything.
func SkeletonDigest(fsys fs.FS) (string, error) {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	err := walkSkeleton(fsys, func(n skeletonNode) error {
		field([]byte{n.kind})
		field([]byte(n.name))
		field([]byte(n.target))
		field(n.data)
		return nil
	})
	if err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
