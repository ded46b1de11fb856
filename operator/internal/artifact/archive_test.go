package artifact

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// entry is one tar entry for the archives the tests build.
type entry struct {
	name     string
	typ      byte
	body     string
	size     int64 // for typ 0 with no body: that many zero bytes
	linkname string
	mode     int64
}

func file(name, body string) entry { return entry{name: name, typ: tar.TypeReg, body: body} }
func dir(name string) entry        { return entry{name: name, typ: tar.TypeDir} }
func symlink(name, target string) entry {
	return entry{name: name, typ: tar.TypeSymlink, linkname: target}
}

// tarBytes builds an uncompressed tar the way the syncer does: fixed times
// and owners.
func tarBytes(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Typeflag: e.typ, Linkname: e.linkname, Mode: 0o644,
			ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if e.mode != 0 {
			hdr.Mode = e.mode
		}
		switch e.typ {
		case tar.TypeReg:
			hdr.Size = int64(len(e.body))
			if e.body == "" {
				hdr.Size = e.size
			}
		case tar.TypeDir:
			hdr.Mode = 0o755
		case tar.TypeChar, tar.TypeBlock:
			hdr.Devmajor, hdr.Devminor = 1, 3
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if e.typ == tar.TypeReg {
			if e.body != "" {
				_, err := tw.Write([]byte(e.body))
				require.NoError(t, err)
			} else if e.size > 0 {
				zero := make([]byte, 1<<20)
				for left := e.size; left > 0; {
					n := min(left, int64(len(zero)))
					_, err := tw.Write(zero[:n])
					require.NoError(t, err)
					left -= n
				}
			}
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	require.NoError(t, err)
	_, err = zw.Write(b)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	return buf.Bytes()
}

func digestOf(b []byte) sluicev1.Digest {
	sum := sha256.Sum256(b)
	return sluicev1.Digest("sha256:" + hex.EncodeToString(sum[:]))
}

// extractInto extracts into <tmp>/root and returns the parent folder, so a
// test can check that nothing landed beside root.
func extractInto(t testing.TB, archive []byte, limits Limits) (string, error) {
	t.Helper()
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	require.NoError(t, os.Mkdir(root, 0o700))
	return parent, ExtractTar(bytes.NewReader(archive), root, limits)
}

// requireConfined checks that the only thing in parent is root and that
// every symbolic link under root resolves inside it.
func requireConfined(t testing.TB, parent string) {
	t.Helper()
	names, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, names, 1, "something was written beside the extraction folder")
	require.Equal(t, "root", names[0].Name())
	root := filepath.Join(parent, "root")
	realRoot, err := filepath.EvalSymlinks(root)
	require.NoError(t, err)
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			resolved, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil // a dangling link points nowhere, so not outside.
			}
			rel, err := filepath.Rel(realRoot, resolved)
			require.NoError(t, err)
			require.True(t, filepath.IsLocal(rel) || rel == ".", "link %s resolves outside to %s", p, resolved)
		}
		if d.Type()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
			t.Fatalf("special file %s was created", p)
		}
		return nil
	})
	require.NoError(t, err)
}

func TestExtract_keepsASafeArchiveExactly(t *testing.T) {
	archive := tarBytes(t,
		dir("services/"),
		dir("services/checkout/"),
		file("services/checkout/service.yaml", "name: checkout\n"),
		file("services/checkout/values.yaml", "replicas: 2\n"),
		file("charts/service/Chart.yaml", "name: service\n"), // parent folders not listed
		entry{name: "services/checkout/terraform/run.sh", typ: tar.TypeReg, body: "#!/bin/sh\n", mode: 0o755},
		symlink("services/checkout/values-staging.yaml", "values.yaml"),
		symlink("charts/current", "service"),
	)
	parent, err := extractInto(t, archive, Limits{})
	require.NoError(t, err)
	requireConfined(t, parent)
	root := filepath.Join(parent, "root")

	b, err := os.ReadFile(filepath.Join(root, "services/checkout/values-staging.yaml"))
	require.NoError(t, err)
	require.Equal(t, "replicas: 2\n", string(b))
	b, err = os.ReadFile(filepath.Join(root, "charts/current/Chart.yaml"))
	require.NoError(t, err)
	require.Equal(t, "name: service\n", string(b))
	fi, err := os.Stat(filepath.Join(root, "services/checkout/terraform/run.sh"))
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&0o100, "executable bit kept")
	fi, err = os.Stat(filepath.Join(root, "services/checkout/service.yaml"))
	require.NoError(t, err)
	require.Zero(t, fi.Mode()&0o077, "files are private to the operator")
}

func TestExtract_refusesEveryUnsafeArchive(t *testing.T) {
	many := make([]entry, 0, 11)
	for i := range 11 {
		many = append(many, file("f"+strings.Repeat("x", i), "x"))
	}
	cases := []struct {
		name    string
		entries []entry
		limits  Limits
		problem string
	}{
		{name: "a ../ entry", entries: []entry{file("../escaped", "x")}, problem: "'..' segment"},
		{name: "a ../ entry in the middle of a name", entries: []entry{file("a/../../escaped", "x")}, problem: "'..' segment"},
		{name: "an absolute name", entries: []entry{file("/tmp/escaped", "x")}, problem: "absolute name"},
		{name: "a backslash name", entries: []entry{file(`..\escaped`, "x")}, problem: "backslash"},
		{name: "a symlink out followed by a write through it",
			entries: []entry{symlink("link", "../"), file("link/escaped", "x")}, problem: "leaves the archive"},
		{name: "an absolute symlink followed by a write through it",
			entries: []entry{symlink("link", "/tmp"), file("link/escaped", "x")}, problem: "absolute path"},
		{name: "a write through a symlink that stays inside",
			entries: []entry{dir("sub"), symlink("link", "sub"), file("link/f", "x")}, problem: "goes through the symbolic link"},
		{name: "a symlink escaping through another symlink",
			entries: []entry{dir("a"), symlink("a/up", ".."), symlink("l", "a/up/..")}, problem: "symbolic link"},
		{name: "a symlink to its own folder",
			entries: []entry{dir("a"), symlink("a/loop", ".")}, problem: "contains it"},
		{name: "a dangling symlink", entries: []entry{symlink("l", "missing")}, problem: "does not resolve"},
		{name: "a hard link out", entries: []entry{{name: "h", typ: tar.TypeLink, linkname: "/etc/passwd"}}, problem: "hard links"},
		{name: "a hard link inside", entries: []entry{file("a", "x"), {name: "h", typ: tar.TypeLink, linkname: "a"}}, problem: "hard links"},
		{name: "a character device", entries: []entry{{name: "null", typ: tar.TypeChar}}, problem: "device files"},
		{name: "a block device", entries: []entry{{name: "sda", typ: tar.TypeBlock}}, problem: "device files"},
		{name: "a FIFO", entries: []entry{{name: "pipe", typ: tar.TypeFifo}}, problem: "FIFOs"},
		{name: "a name twice (an overwrite)", entries: []entry{file("a", "x"), file("a", "y")}, problem: "appears twice"},
		{name: "a file where a folder was", entries: []entry{file("a", "x"), file("a/b", "y")}, problem: "not a directory"},
		{name: "too many entries", entries: many, limits: Limits{MaxEntries: 10}, problem: "more than 10 entries"},
		{name: "a file over the file limit", entries: []entry{{name: "big", typ: tar.TypeReg, size: 2 << 20}},
			limits: Limits{MaxFileBytes: 1 << 20}, problem: "over the 1048576-byte limit"},
		{name: "a decompression bomb of files each under the file limit",
			entries: []entry{{name: "z1", typ: tar.TypeReg, size: 3 << 20}, {name: "z2", typ: tar.TypeReg, size: 3 << 20}},
			limits:  Limits{MaxUncompressedBytes: 4 << 20}, problem: "more than 4194304 bytes uncompressed"},
		{name: "a name too deep", entries: []entry{file(strings.Repeat("d/", 70)+"f", "x")}, problem: "deeper than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			parent, err := extractInto(t, tarBytes(t, tc.entries...), tc.limits)
			var unsafe *UnsafeArchiveError
			require.True(t, errors.As(err, &unsafe), "want an UnsafeArchiveError, got %v", err)
			require.Contains(t, err.Error(), tc.problem)
			requireConfined(t, parent)
		})
	}
}

func TestExtract_refusesAGzipBombBeforeFillingTheDisk(t *testing.T) {
	// 64 MiB of zeros in one file compresses to about 64 KiB.
	bomb := gz(t, tarBytes(t, entry{name: "zeros", typ: tar.TypeReg, size: 64 << 20}))
	require.Less(t, len(bomb), 1<<20)
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	require.NoError(t, os.Mkdir(root, 0o700))
	err := ExtractTarGz(bytes.NewReader(bomb), root, Limits{MaxUncompressedBytes: 8 << 20, MaxFileBytes: 128 << 20})
	require.ErrorContains(t, err, "more than 8388608 bytes uncompressed")
	requireConfined(t, parent)
	var total int64
	_ = filepath.WalkDir(root, func(_ string, d fs.DirEntry, _ error) error {
		if fi, err := d.Info(); err == nil && d.Type().IsRegular() {
			total += fi.Size()
		}
		return nil
	})
	require.LessOrEqual(t, total, int64(8<<20))
}

func TestExtract_refusesGarbage(t *testing.T) {
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	require.NoError(t, os.Mkdir(root, 0o700))
	var unsafe *UnsafeArchiveError
	require.ErrorAs(t, ExtractTarGz(strings.NewReader("not gzip at all"), root, Limits{}), &unsafe)
	require.ErrorAs(t, ExtractTar(strings.NewReader(strings.Repeat("x", 1024)), root, Limits{}), &unsafe)
}

// FuzzExtract feeds arbitrary bytes to the extractor: it may refuse, but it
// never panics, never writes outside its folder and never leaves a link
// pointing out of it.
func FuzzExtract(f *testing.F) {
	seeds := [][]entry{
		{file("a", "x"), dir("d"), file("d/b", "y"), symlink("l", "a")},
		{file("../escaped", "x")},
		{file("/tmp/escaped", "x")},
		{symlink("link", ".."), file("link/escaped", "x")},
		{symlink("link", "/tmp"), file("link/escaped", "x")},
		{dir("a"), symlink("a/up", ".."), symlink("l", "a/up/.."), file("l/escaped", "x")},
		{{name: "h", typ: tar.TypeLink, linkname: "/etc/passwd"}},
		{{name: "null", typ: tar.TypeChar}},
		{file("a", "x"), file("a", "y")},
	}
	for _, s := range seeds {
		f.Add(tarBytes(f, s...))
	}
	f.Add([]byte("garbage"))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		root := filepath.Join(parent, "root")
		require.NoError(t, os.Mkdir(root, 0o700))
		limits := Limits{MaxUncompressedBytes: 1 << 20, MaxEntries: 64, MaxFileBytes: 1 << 20}
		err := ExtractTar(bytes.NewReader(data), root, limits)
		if err != nil {
			var unsafe *UnsafeArchiveError
			require.ErrorAs(t, err, &unsafe, "every refusal is an UnsafeArchiveError")
		}
		requireConfined(t, parent)
		// The gzip path must hold the same promises.
		parent2 := t.TempDir()
		root2 := filepath.Join(parent2, "root")
		require.NoError(t, os.Mkdir(root2, 0o700))
		_ = ExtractTarGz(bytes.NewReader(data), root2, limits)
		requireConfined(t, parent2)
	})
}
