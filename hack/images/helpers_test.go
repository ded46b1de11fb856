package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// testCA writes a stand-in CA bundle (the tests must not depend on the
// host's).
func testCA(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(p, []byte("-----BEGIN CERTIFICATE-----\ntest\n-----END CERTIFICATE-----\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// testImages is a release of one image holding the hello test binary.
func testImages() []ReleaseImage {
	return []ReleaseImage{{
		Name: "hello", Repo: "sluice-gitops/hello",
		Binaries:   []Binary{{Pkg: "./testdata/hello", Dst: "/usr/local/bin/hello"}},
		Entrypoint: []string{"/usr/local/bin/hello"},
	}}
}

// testRelease builds the test release into out with key (created when
// missing).
func testRelease(t *testing.T, out, key, ca string) []BuiltImage {
	t.Helper()
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	built, err := Release(ReleaseOptions{
		Root: root, Out: out, Tag: "1.2.3", StampVersion: "v1.2.3", Commit: "0123456789abcdef",
		VersionPkg: "main", Created: time.Unix(1764000000, 0).UTC(), Source: defaultSource,
		Arches: []string{"amd64", "arm64"}, CABundle: ca, KeyPath: key, PubPath: filepath.Join(out, "cosign.pub"),
		GenerateKey: true, Images: testImages(), Log: &log,
	})
	if err != nil {
		t.Fatalf("release: %v\n%s", err, log.String())
	}
	return built
}

// readFile reads a file or fails the test.
func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
