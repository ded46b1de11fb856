package changespec

import (
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

// WriteSkeleton writes the folders, symlinks and parser-relevant files of
// fsys under dst. Symlinks are written last, so nothing is written through
// one; a symlink's target is written as is and the parser's own
// confinement checks judge it.
func WriteSkeleton(fsys fs.FS, dst string) error {
	type link struct{ name, target string }
	var links []link
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		out := filepath.Join(dst, filepath.FromSlash(name))
		switch {
		case d.IsDir():
			return os.MkdirAll(out, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := fs.ReadLink(fsys, name)
			if err != nil {
				return err
			}
			links = append(links, link{name: out, target: target})
			return nil
		case !d.Type().IsRegular():
			return nil
		}
		var data []byte
		if wantContent(name) {
			if data, err = fs.ReadFile(fsys, name); err != nil {
				return err
			}
		}
		return os.WriteFile(out, data, 0o644)
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
