package artifact

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sluice-gitops/sluice/kit/text"
)

// Limits bound what an artifact may hold. Zero fields take the defaults of
// DefaultLimits.
type Limits struct {
	// MaxArchiveBytes caps the downloaded .tar.gz.
	MaxArchiveBytes int64
	// MaxUncompressedBytes caps the decompressed stream as a whole (tar
	// headers and padding included): the decompression-bomb limit.
	MaxUncompressedBytes int64
	// MaxFileBytes caps one regular file.
	MaxFileBytes int64
	// MaxEntries caps the number of tar entries.
	MaxEntries int
	// MaxNameLength caps an entry's name in bytes.
	MaxNameLength int
	// MaxDepth caps the number of path segments of an entry.
	MaxDepth int
}

// DefaultLimits are generous for a service folder, a chart and a Terraform
// stack, and small enough that no artifact can fill the operator's disk.
var DefaultLimits = Limits{
	MaxArchiveBytes:      64 << 20,
	MaxUncompressedBytes: 256 << 20,
	MaxFileBytes:         32 << 20,
	MaxEntries:           10000,
	MaxNameLength:        1024,
	MaxDepth:             64,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxArchiveBytes > 0 {
		d.MaxArchiveBytes = l.MaxArchiveBytes
	}
	if l.MaxUncompressedBytes > 0 {
		d.MaxUncompressedBytes = l.MaxUncompressedBytes
	}
	if l.MaxFileBytes > 0 {
		d.MaxFileBytes = l.MaxFileBytes
	}
	if l.MaxEntries > 0 {
		d.MaxEntries = l.MaxEntries
	}
	if l.MaxNameLength > 0 {
		d.MaxNameLength = l.MaxNameLength
	}
	if l.MaxDepth > 0 {
		d.MaxDepth = l.MaxDepth
	}
	return d
}

// UnsafeArchiveError says an archive was refused because of one entry or
// one limit. Nothing of a refused archive is kept.
type UnsafeArchiveError struct {
	// Entry is the offending entry's name (quoted in Error), empty for an
	// archive-wide limit.
	Entry string
	// Problem says what is wrong.
	Problem string
}

func (e *UnsafeArchiveError) Error() string {
	if e.Entry == "" {
		return "unsafe archive: " + e.Problem
	}
	return fmt.Sprintf("unsafe archive: entry %q: %s", e.Entry, e.Problem)
}

func unsafeEntry(name, format string, args ...any) error {
	return &UnsafeArchiveError{Entry: text.Truncate(name, 200), Problem: fmt.Sprintf(format, args...)}
}

// errTooBig is returned by limitedReader past its limit.
var errTooBig = errors.New("too big")

// limitedReader fails (instead of ending quietly like io.LimitReader) once
// more than n bytes were read, so a truncated stream is never mistaken for
// a complete one.
type limitedReader struct {
	r io.Reader
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n < 0 {
		return 0, errTooBig
	}
	if int64(len(p)) > l.n+1 {
		p = p[:l.n+1]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	if l.n < 0 {
		return n, errTooBig
	}
	return n, err
}

// ExtractTarGz extracts a gzip-compressed tar stream into dir (which must
// exist and should be empty) under the limits. See ExtractTar for what is
// refused.
func ExtractTarGz(r io.Reader, dir string, limits Limits) error {
	limits = limits.withDefaults()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return &UnsafeArchiveError{Problem: fmt.Sprintf("not a gzip stream: %v", err)}
	}
	defer func() { _ = zr.Close() }()
	return ExtractTar(zr, dir, limits)
}

// ExtractTar extracts a tar stream into dir under the limits, with every
// entry confined to dir. It refuses the whole archive on the first entry
// that is absolute, has a ".." segment, goes through a symbolic link, is a
// hard link, a device, a FIFO or any other special file, repeats an earlier
// name, or breaks a limit; and after extraction on any symbolic link that
// does not resolve inside dir. On refusal dir is emptied again, so no link
// that was refused late is left behind.
func ExtractTar(r io.Reader, dir string, limits Limits) error {
	err := extractTar(r, dir, limits.withDefaults())
	if err != nil {
		if cerr := emptyDir(dir); cerr != nil {
			return errors.Join(err, cerr)
		}
	}
	return err
}

// emptyDir removes everything inside dir without following links.
func emptyDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("empty extraction folder: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("empty extraction folder: %w", err)
		}
	}
	return nil
}

func extractTar(r io.Reader, dir string, limits Limits) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return fmt.Errorf("open extraction folder: %w", err)
	}
	defer func() { _ = root.Close() }()

	stream := &limitedReader{r: r, n: limits.MaxUncompressedBytes}
	tr := tar.NewReader(stream)
	seen := map[string]byte{} // cleaned name -> tar type flag
	var symlinks []string
	entries := 0
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(err, errTooBig) {
				return &UnsafeArchiveError{Problem: fmt.Sprintf("more than %d bytes uncompressed", limits.MaxUncompressedBytes)}
			}
			return &UnsafeArchiveError{Problem: fmt.Sprintf("read tar: %v", err)}
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue // a pax global header names no file.
		}
		entries++
		if entries > limits.MaxEntries {
			return &UnsafeArchiveError{Problem: fmt.Sprintf("more than %d entries", limits.MaxEntries)}
		}
		name, err := cleanName(hdr.Name, limits)
		if err != nil {
			return err
		}
		if name == "." {
			if hdr.Typeflag != tar.TypeDir {
				return unsafeEntry(hdr.Name, "the archive root must be a directory")
			}
			continue
		}
		if _, dup := seen[name]; dup {
			return unsafeEntry(hdr.Name, "appears twice")
		}
		// No entry may be written through a symbolic link, even one that
		// stays inside: the archive's tree must be what it says.
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if seen[p] == tar.TypeSymlink {
				return unsafeEntry(hdr.Name, "goes through the symbolic link %q", p)
			}
		}
		seen[name] = hdr.Typeflag
		if err := ensureParents(root, name, seen); err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.Mkdir(name, 0o700); err != nil {
				return unsafeEntry(hdr.Name, "create directory: %v", err)
			}
		case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // TypeRegA is still written by old tars.
			if hdr.Size < 0 || hdr.Size > limits.MaxFileBytes {
				return unsafeEntry(hdr.Name, "file of %d bytes is over the %d-byte limit", hdr.Size, limits.MaxFileBytes)
			}
			if err := writeFile(root, name, tr, hdr); err != nil {
				if errors.Is(err, errTooBig) {
					return &UnsafeArchiveError{Problem: fmt.Sprintf("more than %d bytes uncompressed", limits.MaxUncompressedBytes)}
				}
				return unsafeEntry(hdr.Name, "write: %v", err)
			}
		case tar.TypeSymlink:
			target := hdr.Linkname
			if target == "" || strings.ContainsRune(target, 0) || len(target) > limits.MaxNameLength {
				return unsafeEntry(hdr.Name, "symbolic link with an invalid target")
			}
			if path.IsAbs(target) || strings.HasPrefix(target, `\`) {
				return unsafeEntry(hdr.Name, "symbolic link to an absolute path")
			}
			if resolved := path.Join(path.Dir(name), target); !localName(resolved) {
				return unsafeEntry(hdr.Name, "symbolic link leaves the archive")
			}
			if err := root.Symlink(target, name); err != nil {
				return unsafeEntry(hdr.Name, "create symbolic link: %v", err)
			}
			symlinks = append(symlinks, name)
		case tar.TypeLink:
			return unsafeEntry(hdr.Name, "hard links are not allowed")
		case tar.TypeChar, tar.TypeBlock:
			return unsafeEntry(hdr.Name, "device files are not allowed")
		case tar.TypeFifo:
			return unsafeEntry(hdr.Name, "FIFOs are not allowed")
		default:
			return unsafeEntry(hdr.Name, "entry type %q is not allowed", string(hdr.Typeflag))
		}
	}
	// The rest of the stream (tar padding) still counts for the bomb limit.
	if _, err := io.Copy(io.Discard, stream); err != nil {
		if errors.Is(err, errTooBig) {
			return &UnsafeArchiveError{Problem: fmt.Sprintf("more than %d bytes uncompressed", limits.MaxUncompressedBytes)}
		}
		return &UnsafeArchiveError{Problem: fmt.Sprintf("read tar: %v", err)}
	}
	return checkSymlinks(dir, symlinks)
}

// cleanName checks an entry name and returns it cleaned, slash-separated and
// relative ("." for the archive root).
func cleanName(raw string, limits Limits) (string, error) {
	if raw == "" {
		return "", unsafeEntry(raw, "empty name")
	}
	if len(raw) > limits.MaxNameLength {
		return "", unsafeEntry(raw, "name longer than %d bytes", limits.MaxNameLength)
	}
	if strings.ContainsRune(raw, 0) || strings.ContainsRune(raw, '\\') {
		return "", unsafeEntry(raw, "name holds a NUL or a backslash")
	}
	if path.IsAbs(raw) {
		return "", unsafeEntry(raw, "absolute name")
	}
	for _, seg := range strings.Split(raw, "/") {
		if seg == ".." {
			return "", unsafeEntry(raw, "name has a '..' segment")
		}
	}
	name := path.Clean(raw)
	if name != "." && !localName(name) {
		return "", unsafeEntry(raw, "name leaves the archive")
	}
	if strings.Count(name, "/")+1 > limits.MaxDepth {
		return "", unsafeEntry(raw, "deeper than %d levels", limits.MaxDepth)
	}
	return name, nil
}

// localName reports whether a cleaned slash path stays inside its root.
func localName(p string) bool {
	return p != "" && p != ".." && !strings.HasPrefix(p, "../") && !path.IsAbs(p) && filepath.IsLocal(filepath.FromSlash(p))
}

// ensureParents creates the missing parent directories of name (archives
// need not list them) and refuses a parent that exists as anything but a
// directory.
func ensureParents(root *os.Root, name string, seen map[string]byte) error {
	parent := path.Dir(name)
	if parent == "." {
		return nil
	}
	var missing []string
	for p := parent; p != "."; p = path.Dir(p) {
		t, ok := seen[p]
		if ok {
			if t != tar.TypeDir {
				return unsafeEntry(name, "parent %q is not a directory", p)
			}
			break
		}
		missing = append(missing, p)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := root.Mkdir(missing[i], 0o700); err != nil {
			return unsafeEntry(name, "create parent directory: %v", err)
		}
		seen[missing[i]] = tar.TypeDir
	}
	return nil
}

// writeFile creates a new regular file (never through or over an existing
// name) and copies exactly hdr.Size bytes into it.
func writeFile(root *os.Root, name string, r io.Reader, hdr *tar.Header) error {
	perm := fs.FileMode(0o600)
	if hdr.Mode&0o111 != 0 {
		perm = 0o700 // keep executables executable (terraform helper scripts).
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	n, err := io.Copy(f, io.LimitReader(r, hdr.Size))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n != hdr.Size {
		return fmt.Errorf("truncated: %d of %d bytes", n, hdr.Size)
	}
	return nil
}

// checkSymlinks resolves every extracted symbolic link on disk and refuses
// one that is dangling or ends outside dir; lexical checks alone miss a link
// whose target climbs out through another link ("l -> a/up/.." with
// "a/up -> ..").
func checkSymlinks(dir string, links []string) error {
	if len(links) == 0 {
		return nil
	}
	realDir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("resolve extraction folder: %w", err)
	}
	for _, l := range links {
		resolved, err := filepath.EvalSymlinks(filepath.Join(dir, filepath.FromSlash(l)))
		if err != nil {
			return unsafeEntry(l, "symbolic link does not resolve inside the archive")
		}
		rel, err := filepath.Rel(realDir, resolved)
		if err != nil || !filepath.IsLocal(rel) {
			return unsafeEntry(l, "symbolic link leaves the archive or points at its root")
		}
		// A link to one of its own ancestors makes an endless tree for
		// every walker that follows links (Helm's chart loader does).
		up, err := filepath.Rel(resolved, filepath.Join(realDir, filepath.FromSlash(path.Dir(l))))
		if err == nil && (up == "." || filepath.IsLocal(up)) {
			return unsafeEntry(l, "symbolic link points at a folder that contains it")
		}
	}
	return nil
}
