package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func TestParseFileSpec_badInput(t *testing.T) {
	for _, arg := range []string{"", "noequals", "=src", "/dst=", "rel=src", "/a/../../etc=src", "/=src"} {
		var fe *FileSpecError
		if _, err := ParseFileSpec(arg); !errors.As(err, &fe) {
			t.Errorf("ParseFileSpec(%q) = %v, want a FileSpecError", arg, err)
		}
	}
	got, err := ParseFileSpec("/usr//local/bin/x=some/file")
	if err != nil || got.Dst != "/usr/local/bin/x" || got.Src != "some/file" {
		t.Fatalf("ParseFileSpec = %+v, %v", got, err)
	}
}

func TestBuildVerb_badInput(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "f")
	if err := os.WriteFile(src, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "o.tar")
	ca := testCA(t)
	cases := map[string][]string{
		"no -o":          {"-t", "a/b:1", "/f=" + src},
		"no files":       {"-o", out, "-t", "a/b:1"},
		"bad ref":        {"-o", out, "-t", "UPPER/Case::x", "-ca", ca, "/f=" + src},
		"bad arch":       {"-o", out, "-t", "a/b:1", "-arch", "s390x", "-ca", ca, "/f=" + src},
		"user name":      {"-o", out, "-t", "a/b:1", "-user", "nobody", "-ca", ca, "/f=" + src},
		"missing source": {"-o", out, "-t", "a/b:1", "-ca", ca, "/f=" + filepath.Join(dir, "absent")},
		"bad file arg":   {"-o", out, "-t", "a/b:1", "-ca", ca, "f=" + src},
		"bad epoch":      {"-o", out, "-t", "a/b:1", "-epoch", "yesterday", "-ca", ca, "/f=" + src},
		"bad entrypoint": {"-o", out, "-t", "a/b:1", "-entrypoint", "[1,2]", "-ca", ca, "/f=" + src},
		"missing CA":     {"-o", out, "-t", "a/b:1", "-ca", filepath.Join(dir, "no-ca"), "/f=" + src},
	}
	for name, args := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if err := run(append([]string{"build"}, args...), &stdout, &stderr); err == nil {
				t.Fatalf("build %v succeeded", args)
			}
			if _, err := os.Stat(out); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("a failed build left %s", out)
			}
		})
	}
}

// TestBuildVerb_reproducible builds the same files twice, from copies with
// other mtimes and permissions, and wants the same bytes; and checks what
// the layers hold.
func TestBuildVerb_reproducible(t *testing.T) {
	ca := testCA(t)
	var tars [][]byte
	for i, mode := range []os.FileMode{0o755, 0o700} {
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "tree", "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		for p, content := range map[string]string{"app": "binary", "tree/a.conf": "a", "tree/sub/b.conf": "b"} {
			if err := os.WriteFile(filepath.Join(dir, p), []byte(content), mode&^0o111|0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chmod(filepath.Join(dir, "app"), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("a.conf", filepath.Join(dir, "tree", "link")); err != nil {
			t.Fatal(err)
		}
		stamp := time.Unix(int64(1000000*(i+1)), 0)
		for _, p := range []string{"app", "tree/a.conf", "tree/sub/b.conf", "tree"} {
			if err := os.Chtimes(filepath.Join(dir, p), stamp, stamp); err != nil {
				t.Fatal(err)
			}
		}
		out := filepath.Join(dir, "img.tar")
		var stdout, stderr bytes.Buffer
		err := run([]string{"build", "-o", out, "-t", "sluice-gitops/test:1", "-entrypoint", "/app serve", "-user", "65532:65532",
			"-arch", "arm64", "-epoch", "1700000000", "-ca", ca, "-env", "A=b",
			"/app=" + filepath.Join(dir, "app"), "/etc/test=" + filepath.Join(dir, "tree")}, &stdout, &stderr)
		if err != nil {
			t.Fatalf("build: %v\n%s", err, stderr.String())
		}
		tars = append(tars, readFile(t, out))
	}
	if !bytes.Equal(tars[0], tars[1]) {
		t.Fatal("two builds of the same files differ")
	}

	img, err := tarball.Image(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(tars[0])), nil }, nil)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.OS != "linux" || cf.Architecture != "arm64" || cf.Config.User != "65532:65532" ||
		strings.Join(cf.Config.Entrypoint, " ") != "/app serve" || cf.Created.Unix() != 1700000000 {
		t.Fatalf("config = %+v", cf)
	}
	got := map[string]*tar.Header{}
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(rc)
		prev := ""
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Name < prev {
				t.Errorf("entries not sorted: %s after %s", h.Name, prev)
			}
			prev = h.Name
			if h.ModTime.Unix() != 1700000000 || h.Uid != 0 || h.Uname != "" {
				t.Errorf("%s: mtime %v uid %d uname %q", h.Name, h.ModTime, h.Uid, h.Uname)
			}
			got[h.Name] = h
		}
		rc.Close()
	}
	want := map[string]int64{
		"tmp/": 0o1777, "app": 0o755, "etc/test/a.conf": 0o644, "etc/test/sub/b.conf": 0o644, "etc/test/sub/": 0o755,
		"etc/ssl/certs/ca-certificates.crt": 0o644, "etc/passwd": 0o644, "etc/group": 0o644,
	}
	for n, mode := range want {
		h, ok := got[n]
		if !ok {
			t.Errorf("layer lacks %s", n)
			continue
		}
		if h.Mode != mode {
			t.Errorf("%s: mode %o, want %o", n, h.Mode, mode)
		}
	}
	if h := got["etc/test/link"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "a.conf" {
		t.Errorf("symlink not kept: %+v", h)
	}
}

func TestCheckBinary_refusesUnfitBinaries(t *testing.T) {
	var be *BinaryError
	if err := CheckBinary("/bin/sh", "amd64"); !errors.As(err, &be) {
		t.Errorf("dynamic /bin/sh: %v, want a BinaryError", err)
	}
	notELF := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckBinary(notELF, "amd64"); !errors.As(err, &be) {
		t.Errorf("script: %v, want a BinaryError", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	if err := CheckBinary(self, other); !errors.As(err, &be) {
		t.Errorf("%s binary as %s: %v, want a BinaryError", runtime.GOARCH, other, err)
	}
}
