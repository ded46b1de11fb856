package main

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
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// FileSpecError reports a /dst=src argument that cannot become a layer entry.
type FileSpecError struct {
	Arg    string
	Reason string
}

func (e *FileSpecError) Error() string {
	return fmt.Sprintf("file argument %q: %s", e.Arg, e.Reason)
}

// FileSpec maps a path in the image (Dst, absolute) to a host file or
// directory (Src).
type FileSpec struct {
	Dst string
	Src string
}

// ParseFileSpec parses "/dst=src". The destination must be absolute and
// must not climb out of the root.
func ParseFileSpec(arg string) (FileSpec, error) {
	dst, src, ok := strings.Cut(arg, "=")
	if !ok || dst == "" || src == "" {
		return FileSpec{}, &FileSpecError{Arg: arg, Reason: "want /dst=src"}
	}
	if !strings.HasPrefix(dst, "/") {
		return FileSpec{}, &FileSpecError{Arg: arg, Reason: "destination must be absolute"}
	}
	for _, part := range strings.Split(dst, "/") {
		if part == ".." {
			return FileSpec{}, &FileSpecError{Arg: arg, Reason: "destination must not contain .."}
		}
	}
	clean := path.Clean(dst)
	if clean == "/" {
		return FileSpec{}, &FileSpecError{Arg: arg, Reason: "destination must not be the root"}
	}
	return FileSpec{Dst: clean, Src: src}, nil
}

// entry is one tar entry before it is written; content is read lazily so
// that big binaries are not held twice.
type entry struct {
	name     string // relative, no leading slash; directories without trailing slash
	typeflag byte
	mode     int64
	uid, gid int
	linkname string
	src      string // host file for regular files
	data     []byte // inline content (used when src is empty)
}

// layerBuilder collects entries and writes them as a reproducible tar:
// sorted names, one fixed mtime, root ownership unless said otherwise,
// normalised modes, and no user/group names, device numbers or PAX times.
type layerBuilder struct {
	entries map[string]*entry
}

func newLayerBuilder() *layerBuilder {
	return &layerBuilder{entries: map[string]*entry{}}
}

// addDir adds a directory and its missing parents.
func (b *layerBuilder) addDir(name string, mode int64, uid, gid int) {
	name = strings.Trim(name, "/")
	if name == "" || name == "." {
		return
	}
	b.addParents(name)
	b.entries[name] = &entry{name: name, typeflag: tar.TypeDir, mode: mode, uid: uid, gid: gid}
}

// addParents adds each missing parent directory of name with mode 0755.
func (b *layerBuilder) addParents(name string) {
	for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
		if _, ok := b.entries[dir]; !ok {
			b.entries[dir] = &entry{name: dir, typeflag: tar.TypeDir, mode: 0o755}
		}
	}
}

// addData adds a regular file with inline content.
func (b *layerBuilder) addData(name string, data []byte, mode int64) {
	name = strings.Trim(name, "/")
	b.addParents(name)
	b.entries[name] = &entry{name: name, typeflag: tar.TypeReg, mode: mode, data: data}
}

// addSpec adds a host file, symlink or a whole directory tree under spec.Dst.
func (b *layerBuilder) addSpec(spec FileSpec) error {
	info, err := os.Lstat(spec.Src)
	if err != nil {
		return &FileSpecError{Arg: spec.Dst + "=" + spec.Src, Reason: err.Error()}
	}
	if !info.IsDir() {
		return b.addHostEntry(strings.TrimPrefix(spec.Dst, "/"), spec.Src, info)
	}
	return filepath.WalkDir(spec.Src, func(p string, d fs.DirEntry, walkErr error) error {
		if walkErr != nil {
			return &FileSpecError{Arg: spec.Dst + "=" + spec.Src, Reason: walkErr.Error()}
		}
		rel, err := filepath.Rel(spec.Src, p)
		if err != nil {
			return err
		}
		name := path.Join(strings.TrimPrefix(spec.Dst, "/"), filepath.ToSlash(rel))
		info, err := d.Info()
		if err != nil {
			return &FileSpecError{Arg: spec.Dst + "=" + spec.Src, Reason: err.Error()}
		}
		return b.addHostEntry(name, p, info)
	})
}

// addHostEntry adds one host path. Modes are normalised (0755 for
// directories and executables, 0644 otherwise) so that a umask or a
// checkout's permissions do not change the digest.
func (b *layerBuilder) addHostEntry(name, src string, info fs.FileInfo) error {
	switch {
	case info.IsDir():
		b.addDir(name, 0o755, 0, 0)
	case info.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return &FileSpecError{Arg: "/" + name + "=" + src, Reason: err.Error()}
		}
		b.addParents(name)
		b.entries[name] = &entry{name: name, typeflag: tar.TypeSymlink, mode: 0o777, linkname: target}
	case info.Mode().IsRegular():
		mode := int64(0o644)
		if info.Mode().Perm()&0o111 != 0 {
			mode = 0o755
		}
		b.addParents(name)
		b.entries[name] = &entry{name: name, typeflag: tar.TypeReg, mode: mode, src: src}
	default:
		return &FileSpecError{Arg: "/" + name + "=" + src, Reason: "not a regular file, directory or symlink"}
	}
	return nil
}

// writeTar writes the entries, sorted by name, with the given mtime.
func (b *layerBuilder) writeTar(w io.Writer, mtime time.Time) error {
	names := make([]string, 0, len(b.entries))
	for n := range b.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	tw := tar.NewWriter(w)
	for _, n := range names {
		if err := writeEntry(tw, b.entries[n], mtime); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeEntry writes one header and, for regular files, its content.
func writeEntry(tw *tar.Writer, e *entry, mtime time.Time) error {
	hdr := &tar.Header{
		Typeflag: e.typeflag,
		Name:     e.name,
		Linkname: e.linkname,
		Mode:     e.mode,
		Uid:      e.uid,
		Gid:      e.gid,
		ModTime:  mtime,
		Format:   tar.FormatPAX, // long names without GNU extensions; no atime/ctime records are written
	}
	if e.typeflag == tar.TypeDir {
		hdr.Name += "/"
	}
	var content io.Reader
	if e.typeflag == tar.TypeReg {
		if e.src == "" {
			hdr.Size = int64(len(e.data))
			content = bytes.NewReader(e.data)
		} else {
			f, err := os.Open(e.src)
			if err != nil {
				return &FileSpecError{Arg: "/" + e.name + "=" + e.src, Reason: err.Error()}
			}
			defer f.Close()
			st, err := f.Stat()
			if err != nil {
				return err
			}
			hdr.Size = st.Size()
			content = f
		}
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("tar header %s: %w", e.name, err)
	}
	if content != nil {
		n, err := io.Copy(tw, content)
		if err != nil {
			return fmt.Errorf("tar content %s: %w", e.name, err)
		}
		if n != hdr.Size {
			return fmt.Errorf("tar content %s: %w", e.name, errors.New("file changed while it was read"))
		}
	}
	return nil
}

// layer turns the builder into an OCI layer. The tar is rendered into
// memory once, so digests, diff IDs and the compressed stream all come from
// the same bytes.
func (b *layerBuilder) layer(mtime time.Time) (v1.Layer, error) {
	var buf bytes.Buffer
	if err := b.writeTar(&buf, mtime); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(data)), nil
	}, tarball.WithMediaType(types.OCILayer), tarball.WithCompressedCaching)
}
