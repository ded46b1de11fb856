package runner

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// maxFiles bounds the entries of a job's tar.
const maxFiles = 20000

// packDir tars the regular files, folders and in-tree relative symlinks
// under root (a terraform data folder .terraform is left out).
func packDir(root string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() && d.Name() == ".terraform" {
			return fs.SkipDir
		}
		if n++; n > maxFiles {
			return fmt.Errorf("more than %d files", maxFiles)
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755})
		case info.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			if !inside(target) {
				return fmt.Errorf("%s: a symbolic link that leaves the folder", name)
			}
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777})
		case info.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b))}); err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		default:
			return nil // sockets, devices: nothing a stack needs
		}
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// inside reports whether a symlink target stays inside the tree: relative
// and going down only (a ".." after another link could climb out).
func inside(target string) bool {
	if target == "" || path.IsAbs(target) || strings.Contains(target, "\\") {
		return false
	}
	for _, part := range strings.Split(target, "/") {
		if part == ".." {
			return false
		}
	}
	return true
}

// unpack extracts a job's tar into dst (which must exist), refusing any
// entry that would land outside it.
func unpack(data []byte, dst string) error {
	tr := tar.NewReader(bytes.NewReader(data))
	n := 0
	links := map[string]bool{}
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("stack files: %w", err)
		}
		if n++; n > maxFiles {
			return fmt.Errorf("stack files: more than %d entries", maxFiles)
		}
		name := path.Clean(strings.TrimSuffix(h.Name, "/"))
		if name == "." || path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(h.Name, "\\") {
			return fmt.Errorf("stack files: entry %q leaves the folder", h.Name)
		}
		// Never through a link: a link's target is checked by its text only.
		for d := path.Dir(name); d != "."; d = path.Dir(d) {
			if links[d] {
				return fmt.Errorf("stack files: entry %q lies under the link %q", h.Name, d)
			}
		}
		p := filepath.Join(dst, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
			if err != nil {
				return fmt.Errorf("stack files: %w", err)
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("stack files: %w", err)
			}
		case tar.TypeSymlink:
			if !inside(h.Linkname) {
				return fmt.Errorf("stack files: link %q leaves the folder", h.Name)
			}
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, p); err != nil {
				return fmt.Errorf("stack files: %w", err)
			}
			links[name] = true
		default:
			return fmt.Errorf("stack files: entry %q of type %q is not a file, folder or link", h.Name, h.Typeflag)
		}
	}
}
