package runner

import (
	"archive/tar"
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func tarOf(t testing.TB, entries ...tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		h := h
		body := ""
		if h.Typeflag == tar.TypeReg {
			body = "x"
			h.Size = 1
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if body != "" {
			_, _ = tw.Write([]byte(body))
		}
	}
	_ = tw.Close()
	return buf.Bytes()
}

func TestUnpack_neverWritesOutsideItsFolder(t *testing.T) {
	for name, entries := range map[string][]tar.Header{
		"a parent path":             {{Typeflag: tar.TypeReg, Name: "../evil.tf"}},
		"an absolute path":          {{Typeflag: tar.TypeReg, Name: "/etc/evil.tf"}},
		"an absolute link":          {{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"}},
		"a climbing link":           {{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "../.."}},
		"a file through a link":     {{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "sub"}, {Typeflag: tar.TypeReg, Name: "l/x.tf"}},
		"a link then a dot-dot one": {{Typeflag: tar.TypeSymlink, Name: "a", Linkname: "."}, {Typeflag: tar.TypeSymlink, Name: "b", Linkname: "a/.."}},
		"a device":                  {{Typeflag: tar.TypeChar, Name: "dev"}},
	} {
		t.Run(name, func(t *testing.T) {
			dst := filepath.Join(t.TempDir(), "src")
			if err := os.Mkdir(dst, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := unpack(tarOf(t, entries...), dst); err == nil {
				t.Fatal("unpacked")
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dst), "evil.tf")); err == nil {
				t.Fatal("a file landed outside")
			}
		})
	}
}

func TestPackDir_roundTripsAStackWithItsModules(t *testing.T) {
	src := t.TempDir()
	for _, f := range []string{"services/a/terraform/main.tf", "services/_modules/q/main.tf"} {
		p := filepath.Join(src, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(src, "services/a/terraform/.terraform/providers"), 0o755); err != nil {
		t.Fatal(err)
	}
	b, err := packDir(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := unpack(b, dst); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dst, "services/_modules/q/main.tf"))
	if err != nil || string(got) != "services/_modules/q/main.tf" {
		t.Fatalf("%q %v", got, err)
	}
	if _, err := os.Stat(filepath.Join(dst, "services/a/terraform/.terraform")); err == nil {
		t.Fatal("the terraform data folder travelled")
	}
}

// FuzzUnpack: whatever the tar, nothing lands outside the folder.
func FuzzUnpack(f *testing.F) {
	f.Add(tarOf(f, tar.Header{Typeflag: tar.TypeReg, Name: "a/b.tf"}))
	f.Add(tarOf(f, tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "x"}, tar.Header{Typeflag: tar.TypeReg, Name: "l/y"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		dst := filepath.Join(parent, "src")
		if err := os.Mkdir(dst, 0o700); err != nil {
			t.Fatal(err)
		}
		_ = unpack(data, dst)
		entries, _ := os.ReadDir(parent)
		for _, e := range entries {
			if e.Name() != "src" {
				t.Fatalf("%s landed outside", e.Name())
			}
		}
		_ = filepath.Walk(dst, func(p string, info os.FileInfo, err error) error {
			if err == nil && info.Mode()&os.ModeSymlink != 0 {
				target, _ := os.Readlink(p)
				if filepath.IsAbs(target) || slices.Contains(strings.Split(target, "/"), "..") {
					t.Fatalf("link %s -> %s", p, target)
				}
			}
			return nil
		})
	})
}
