package policy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestBundleDigest_changesWithEveryFileAndOnlyThen(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("p/a.rego", "package main\n")
	write("p/sub/b.rego", "package main.b\n")
	write("p/notes.md", "not a policy")
	write("d/x.yaml", "a: 1\n")
	opts := Options{PolicyDirs: []string{filepath.Join(dir, "p")}, DataFiles: []string{filepath.Join(dir, "d")}}
	digest := func(o Options) string {
		t.Helper()
		d, err := BundleDigest(o)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(d, "sha256:") || len(d) != len("sha256:")+64 {
			t.Fatalf("digest %q", d)
		}
		return d
	}
	base := digest(opts)
	if digest(opts) != base {
		t.Fatal("the same bundle digests differently")
	}
	defaults := digest(Options{})
	if defaults == base || digest(Options{}) != defaults {
		t.Fatal("the default bundle")
	}
	if digest(Options{NoDefaults: true}) == defaults || digest(Options{Kinds: []Kind{KindTerraform}}) == defaults {
		t.Fatal("the defaults left out or cut to one kind are another bundle")
	}

	write("p/notes.md", "still not a policy")
	if digest(opts) != base {
		t.Fatal("a file no engine loads changed the digest")
	}
	for _, step := range []struct {
		name string
		do   func()
	}{
		{"a policy edited", func() { write("p/sub/b.rego", "package main.b\n\ndeny contains 1 if false\n") }},
		{"a policy added", func() { write("p/c.rego", "package main.c\n") }},
		{"a policy renamed", func() {
			if err := os.Rename(filepath.Join(dir, "p/c.rego"), filepath.Join(dir, "p/d.rego")); err != nil {
				t.Fatal(err)
			}
		}},
		{"data edited", func() { write("d/x.yaml", "a: 2\n") }},
	} {
		before := digest(opts)
		step.do()
		if digest(opts) == before {
			t.Fatalf("%s: the digest did not change", step.name)
		}
	}
	if _, err := BundleDigest(Options{PolicyDirs: []string{filepath.Join(dir, "missing")}}); err == nil {
		t.Fatal("a missing policy folder: want an error")
	}
}
