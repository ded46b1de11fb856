package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Extract unpacks a .tar.gz artifact into dir (which must exist). Every
// entry stays inside dir: absolute names, ".." segments and symlinks leaving
// the folder are refused, as are devices, hard links and oversize content.
func Extract(tgz []byte, dir string) error {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return fmt.Errorf("artifact is not gzip: %w", err)
	}
	tr := tar.NewReader(io.LimitReader(zr, MaxSize+1))
	var total int64
	links := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read artifact: %w", err)
		}
		name, err := confined(hdr.Name)
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		case tar.TypeReg:
			total += hdr.Size
			if hdr.Size < 0 || total > MaxSize {
				return fmt.Errorf("artifact is larger than %d MiB", MaxSize>>20)
			}
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
			mode := os.FileMode(0o644)
			if hdr.Mode&0o111 != 0 {
				mode = 0o755
			}
			f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
			if err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
			_, err = io.CopyN(f, tr, hdr.Size)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("extract %s: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := checkLink(name, hdr.Linkname); err != nil {
				return err
			}
			if _, dup := links[name]; dup {
				return fmt.Errorf("artifact entry %s appears twice", name)
			}
			links[name] = hdr.Linkname
		default:
			return fmt.Errorf("artifact entry %s has unsupported type %q", name, hdr.Typeflag)
		}
	}
	// Symlinks last, so no file is ever written through one.
	if err := checkLinkSet(links); err != nil {
		return err
	}
	for name, target := range links {
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
		if err := os.Symlink(target, dst); err != nil {
			return fmt.Errorf("extract %s: %w", name, err)
		}
	}
	return nil
}

// confined cleans a tar entry name and refuses names leaving the root.
func confined(name string) (string, error) {
	if name == "" || strings.Contains(name, "\x00") || strings.Contains(name, "\\") || path.IsAbs(name) {
		return "", fmt.Errorf("artifact entry %q has an unsafe name", name)
	}
	clean := path.Clean(name)
	if clean == "." || clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("artifact entry %q has an unsafe name", name)
	}
	return clean, nil
}
