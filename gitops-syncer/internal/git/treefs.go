package git

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"path"
	"sort"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
)

// treeFS is an fs.FS over a git tree. Symlinks are reported as such by
// ReadDir, Lstat and ReadLink and never followed: Open on a symlink fails,
// so nothing can read outside the tree through one.
type treeFS struct {
	root  *object.Tree
	store storer.EncodedObjectStorer
	lock  *sync.RWMutex
	when  time.Time
}

var (
	_ fs.ReadDirFS  = (*treeFS)(nil)
	_ fs.ReadFileFS = (*treeFS)(nil)
	_ fs.ReadLinkFS = (*treeFS)(nil)
	_ fs.StatFS     = (*treeFS)(nil)
)

// errSymlink is returned when a path goes through a symlink.
var errSymlink = errors.New("symlinks are not followed")

func (t *treeFS) lookup(op, name string) (*object.TreeEntry, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return &object.TreeEntry{Name: ".", Mode: filemode.Dir, Hash: t.root.Hash}, nil
	}
	e, err := t.root.FindEntry(name)
	if err != nil {
		// A symlink on the way makes FindEntry fail too; report it as such.
		for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
			if pe, perr := t.root.FindEntry(dir); perr == nil && pe.Mode == filemode.Symlink {
				return nil, &fs.PathError{Op: op, Path: name, Err: errSymlink}
			}
		}
		return nil, &fs.PathError{Op: op, Path: name, Err: fs.ErrNotExist}
	}
	return e, nil
}

func (t *treeFS) info(name string, e *object.TreeEntry) (fs.FileInfo, error) {
	return &entryInfo{name: path.Base(name), entry: *e, when: t.when, store: t.store, lock: t.lock}, nil
}

// Open implements fs.FS.
func (t *treeFS) Open(name string) (fs.File, error) {
	t.lock.RLock()
	defer t.lock.RUnlock()
	e, err := t.lookup("open", name)
	if err != nil {
		return nil, err
	}
	switch {
	case e.Mode == filemode.Dir:
		entries, err := t.readDir(name)
		if err != nil {
			return nil, err
		}
		fi, _ := t.info(name, e)
		return &dirFile{info: fi, entries: entries}, nil
	case e.Mode == filemode.Symlink:
		return nil, &fs.PathError{Op: "open", Path: name, Err: errSymlink}
	case e.Mode.IsFile():
		data, err := t.readBlob(name, e)
		if err != nil {
			return nil, err
		}
		fi, err := t.info(name, e)
		if err != nil {
			return nil, err
		}
		return &blobFile{info: fi, r: bytes.NewReader(data)}, nil
	}
	return nil, &fs.PathError{Op: "open", Path: name, Err: errors.New("submodules are not supported")}
}

func (t *treeFS) readBlob(name string, e *object.TreeEntry) ([]byte, error) {
	blob, err := object.GetBlob(t.store, e.Hash)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	rd, err := blob.Reader()
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	defer rd.Close()
	data, err := io.ReadAll(rd)
	if err != nil {
		return nil, &fs.PathError{Op: "read", Path: name, Err: err}
	}
	return data, nil
}

// ReadFile implements fs.ReadFileFS.
func (t *treeFS) ReadFile(name string) ([]byte, error) {
	t.lock.RLock()
	defer t.lock.RUnlock()
	e, err := t.lookup("read", name)
	if err != nil {
		return nil, err
	}
	if e.Mode == filemode.Symlink {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errSymlink}
	}
	if !e.Mode.IsFile() {
		return nil, &fs.PathError{Op: "read", Path: name, Err: errors.New("is a directory")}
	}
	return t.readBlob(name, e)
}

// ReadDir implements fs.ReadDirFS.
func (t *treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	t.lock.RLock()
	defer t.lock.RUnlock()
	return t.readDir(name)
}

func (t *treeFS) readDir(name string) ([]fs.DirEntry, error) {
	tree := t.root
	if name != "." {
		e, err := t.lookup("readdir", name)
		if err != nil {
			return nil, err
		}
		if e.Mode != filemode.Dir {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: errors.New("not a directory")}
		}
		tree, err = object.GetTree(t.store, e.Hash)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: name, Err: err}
		}
	}
	out := make([]fs.DirEntry, 0, len(tree.Entries))
	for i := range tree.Entries {
		e := tree.Entries[i]
		fi, err := t.info(path.Join(name, e.Name), &e)
		if err != nil {
			return nil, err
		}
		out = append(out, fs.FileInfoToDirEntry(fi))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out, nil
}

// Stat implements fs.StatFS; like Lstat, it does not follow symlinks.
func (t *treeFS) Stat(name string) (fs.FileInfo, error) { return t.Lstat(name) }

// Lstat implements fs.ReadLinkFS.
func (t *treeFS) Lstat(name string) (fs.FileInfo, error) {
	t.lock.RLock()
	defer t.lock.RUnlock()
	e, err := t.lookup("lstat", name)
	if err != nil {
		return nil, err
	}
	return t.info(name, e)
}

// ReadLink implements fs.ReadLinkFS: the target of a symlink, unresolved.
func (t *treeFS) ReadLink(name string) (string, error) {
	t.lock.RLock()
	defer t.lock.RUnlock()
	e, err := t.lookup("readlink", name)
	if err != nil {
		return "", err
	}
	if e.Mode != filemode.Symlink {
		return "", &fs.PathError{Op: "readlink", Path: name, Err: fs.ErrInvalid}
	}
	data, err := t.readBlob(name, e)
	return string(data), err
}

type entryInfo struct {
	name  string
	entry object.TreeEntry
	when  time.Time
	store storer.EncodedObjectStorer
	lock  *sync.RWMutex
}

func (i *entryInfo) Name() string { return i.name }

// Size reads the blob's size on demand, so walking a tree reads no blobs.
func (i *entryInfo) Size() int64 {
	if !i.entry.Mode.IsFile() && i.entry.Mode != filemode.Symlink {
		return 0
	}
	i.lock.RLock()
	defer i.lock.RUnlock()
	blob, err := object.GetBlob(i.store, i.entry.Hash)
	if err != nil {
		return 0
	}
	return blob.Size
}
func (i *entryInfo) Mode() fs.FileMode {
	switch i.entry.Mode {
	case filemode.Dir:
		return fs.ModeDir | 0o755
	case filemode.Symlink:
		return fs.ModeSymlink | 0o777
	case filemode.Executable:
		return 0o755
	case filemode.Submodule:
		return fs.ModeIrregular
	}
	return 0o644
}
func (i *entryInfo) ModTime() time.Time { return i.when }
func (i *entryInfo) IsDir() bool        { return i.entry.Mode == filemode.Dir }
func (i *entryInfo) Sys() any           { return nil }

type blobFile struct {
	info fs.FileInfo
	r    *bytes.Reader
}

func (f *blobFile) Stat() (fs.FileInfo, error) { return f.info, nil }
func (f *blobFile) Read(p []byte) (int, error) { return f.r.Read(p) }
func (f *blobFile) Close() error               { return nil }

type dirFile struct {
	info    fs.FileInfo
	entries []fs.DirEntry
	off     int
}

func (d *dirFile) Stat() (fs.FileInfo, error) { return d.info, nil }
func (d *dirFile) Read([]byte) (int, error) {
	return 0, &fs.PathError{Op: "read", Path: d.info.Name(), Err: errors.New("is a directory")}
}
func (d *dirFile) Close() error { return nil }

// ReadDir implements fs.ReadDirFile.
func (d *dirFile) ReadDir(n int) ([]fs.DirEntry, error) {
	rest := d.entries[d.off:]
	if n <= 0 {
		d.off = len(d.entries)
		return rest, nil
	}
	if len(rest) == 0 {
		return nil, io.EOF
	}
	if n > len(rest) {
		n = len(rest)
	}
	d.off += n
	return rest[:n], nil
}
