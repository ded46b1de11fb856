package sources

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// The file system a build sees refuses, by itself, every path outside the
// repository: the backstop behind the kustomization walk.
func TestConfinedFS_refusesPathsOutsideTheRepository(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret.yaml"), []byte("x: y\n"), 0o644)
	os.WriteFile(filepath.Join(root, "in.yaml"), []byte("a: b\n"), 0o644)
	if err := os.Symlink(filepath.Join(outside, "secret.yaml"), filepath.Join(root, "link.yaml")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "dir")); err != nil {
		t.Fatal(err)
	}
	fsys, err := newConfinedFS(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.ReadFile(filepath.Join(fsys.root, "in.yaml")); err != nil {
		t.Fatalf("a file inside: %v", err)
	}
	for _, p := range []string{
		filepath.Join(outside, "secret.yaml"),
		filepath.Join(fsys.root, "link.yaml"),
		filepath.Join(fsys.root, "dir", "secret.yaml"),
		filepath.Join(fsys.root, "..", filepath.Base(outside), "secret.yaml"),
		"relative.yaml",
	} {
		if _, err := fsys.ReadFile(p); !errors.Is(err, manifest.ErrOutsideRepo) {
			t.Errorf("ReadFile(%s): want ErrOutsideRepo, got %v", p, err)
		}
		if fsys.Exists(p) {
			t.Errorf("Exists(%s) is true", p)
		}
	}
	if err := fsys.WriteFile(filepath.Join(fsys.root, "new.yaml"), nil); err == nil {
		t.Error("a write went through")
	}
}

func TestGeneratedChart_keepsContentAsItIs(t *testing.T) {
	ch, err := GeneratedChart("svc", "test", []File{{Path: "b/x.yaml", Data: []byte("a: '{{ .Values }}'")}, {Path: "a/y.yaml", Data: []byte("b: c\n")}})
	if err != nil {
		t.Fatal(err)
	}
	if ch.Templates[0].Name != "templates/a/y.yaml" || string(ch.Files[1].Data) != "a: '{{ .Values }}'\n" {
		t.Fatalf("templates %s, files %q", ch.Templates[0].Name, ch.Files[1].Data)
	}
	if _, err := GeneratedChart("svc", "", []File{{Path: "a"}, {Path: "a"}}); err == nil {
		t.Fatal("a duplicate file was accepted")
	}
}
