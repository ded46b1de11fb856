// Package artifact builds the reproducible artifact of a release (DESIGN.md
// §4): a tar of the release's input paths with sorted entries and fixed
// times, owners and modes, whose sha256 is the contentDigest, and its
// .tar.gz for download. It also extracts artifacts with every path confined
// to the target folder, stores them on disk and serves them over HTTP.
package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"
	"time"
)

// MaxSize bounds the uncompressed artifact.
const MaxSize = 256 << 20

// epoch is the modification time of every entry.
var epoch = time.Unix(0, 0).UTC()

// Artifact is a built artifact.
type Artifact struct {
	// ContentDigest is "sha256:<hex>" of the uncompressed tar.
	ContentDigest string
	// TarGz is the compressed artifact served for download.
	TarGz []byte
	// SHA256 is "sha256:<hex>" of TarGz.
	SHA256 string
}

// entry is one file, folder or symlink of the artifact.
type entry struct {
	name   string
	mode   fs.FileMode
	target string // symlinks only
}

// Build makes the artifact of paths (repository-relative files or folders)
// read from fsys. Missing paths are skipped (a manifest may name an optional
// folder); a symlink whose target leaves the repository is an error.
func Build(fsys fs.FS, paths []string) (*Artifact, error) {
	entries := map[string]entry{}
	addParents := func(name string) {
		for dir := path.Dir(name); dir != "." && dir != "/"; dir = path.Dir(dir) {
			entries[dir+"/"] = entry{name: dir + "/", mode: fs.ModeDir}
		}
	}
	for _, p := range paths {
		p = strings.Trim(path.Clean("/"+p), "/")
		if p == "" {
			p = "."
		}
		if !fs.ValidPath(p) {
			return nil, fmt.Errorf("artifact path %q is not a clean relative path", p)
		}
		err := fs.WalkDir(fsys, p, func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) && name == p {
					return fs.SkipAll
				}
				return err
			}
			if name == "." {
				return nil
			}
			switch t := d.Type(); {
			case t.IsDir():
				entries[name+"/"] = entry{name: name + "/", mode: fs.ModeDir}
			case t&fs.ModeSymlink != 0:
				target, err := fs.ReadLink(fsys, name)
				if err != nil {
					return fmt.Errorf("read symlink %s: %w", name, err)
				}
				if err := checkLink(name, target); err != nil {
					return err
				}
				entries[name] = entry{name: name, mode: fs.ModeSymlink, target: target}
			case t.IsRegular():
				info, err := d.Info()
				if err != nil {
					return err
				}
				mode := fs.FileMode(0o644)
				if info.Mode()&0o111 != 0 {
					mode = 0o755
				}
				entries[name] = entry{name: name, mode: mode}
			default:
				return fmt.Errorf("%s: unsupported file type %s", name, t)
			}
			addParents(name)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("collect %s: %w", p, err)
		}
	}
	links := map[string]string{}
	for n, e := range entries {
		if e.mode&fs.ModeSymlink != 0 {
			links[n] = e.target
		}
	}
	if err := checkLinkSet(links); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for n := range entries {
		names = append(names, n)
	}
	sort.Strings(names)

	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	for _, n := range names {
		e := entries[n]
		hdr := &tar.Header{Name: e.name, ModTime: epoch, Uid: 0, Gid: 0, Uname: "", Gname: "", Format: tar.FormatPAX}
		var data []byte
		switch {
		case e.mode&fs.ModeDir != 0:
			hdr.Typeflag = tar.TypeDir
			hdr.Mode = 0o755
		case e.mode&fs.ModeSymlink != 0:
			hdr.Typeflag = tar.TypeSymlink
			hdr.Mode = 0o777
			hdr.Linkname = e.target
		default:
			var err error
			data, err = fs.ReadFile(fsys, e.name)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", e.name, err)
			}
			hdr.Typeflag = tar.TypeReg
			hdr.Mode = int64(e.mode.Perm())
			hdr.Size = int64(len(data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("write %s: %w", e.name, err)
		}
		if _, err := tw.Write(data); err != nil {
			return nil, fmt.Errorf("write %s: %w", e.name, err)
		}
		if raw.Len() > MaxSize {
			return nil, fmt.Errorf("artifact is larger than %d MiB", MaxSize>>20)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("close tar: %w", err)
	}
	return FromTar(raw.Bytes())
}

// FromTar compresses an uncompressed artifact tar with a fixed gzip header.
func FromTar(tarBytes []byte) (*Artifact, error) {
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	zw.Header = gzip.Header{OS: 255} // no name, no time: reproducible.
	if _, err := zw.Write(tarBytes); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compress: %w", err)
	}
	return &Artifact{ContentDigest: Digest(tarBytes), TarGz: gz.Bytes(), SHA256: Digest(gz.Bytes())}, nil
}

// Digest is "sha256:" + hex of b.
func Digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// checkLink refuses symlink targets that are absolute or leave the
// repository root when resolved from the link's folder.
func checkLink(name, target string) error {
	if target == "" || path.IsAbs(target) || strings.HasPrefix(target, "\\") || strings.Contains(target, "\x00") {
		return fmt.Errorf("symlink %s points outside the repository", name)
	}
	resolved := path.Join(path.Dir(name), target)
	if resolved == ".." || strings.HasPrefix(resolved, "../") {
		return fmt.Errorf("symlink %s points outside the repository", name)
	}
	return nil
}

// checkLinkSet refuses symlinks that sit below another symlink or whose
// target goes through one: with neither, the lexical checks of checkLink
// are what the file system will resolve.
func checkLinkSet(links map[string]string) error {
	throughLink := func(p string) bool {
		for dir := path.Dir(p); dir != "." && dir != "/"; dir = path.Dir(dir) {
			if _, ok := links[dir]; ok {
				return true
			}
		}
		return false
	}
	for name, target := range links {
		if throughLink(name) {
			return fmt.Errorf("symlink %s sits below another symlink", name)
		}
		// Every folder the target passes through, ".." steps included.
		cur := path.Dir(name)
		for _, part := range strings.Split(target, "/") {
			if part == "" || part == "." {
				continue
			}
			if _, ok := links[cur]; ok && cur != "." {
				return fmt.Errorf("symlink %s resolves through another symlink", name)
			}
			cur = path.Join(cur, part)
		}
	}
	return nil
}

// ContentDigestOfTarGz returns the contentDigest of a downloaded .tar.gz
// (the sha256 of its uncompressed tar), reading at most MaxSize bytes.
func ContentDigestOfTarGz(tgz []byte) (string, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return "", fmt.Errorf("artifact is not gzip: %w", err)
	}
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(zr, MaxSize+1))
	if err != nil {
		return "", fmt.Errorf("decompress artifact: %w", err)
	}
	if n > MaxSize {
		return "", fmt.Errorf("artifact is larger than %d MiB", MaxSize>>20)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
