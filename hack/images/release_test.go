package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/match"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// The release most tests read, built once: every release compiles the
// test binary for two architectures, and the machine may be busy.
var fixture struct {
	once  sync.Once
	out   string
	built []BuiltImage
	err   error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixture.out != "" {
		os.RemoveAll(fixture.out)
	}
	os.Exit(code)
}

// releaseFixture returns the shared release; tests that tamper work on a
// copy of its layout.
func releaseFixture(t *testing.T) (out string, built []BuiltImage) {
	t.Helper()
	fixture.once.Do(func() {
		if fixture.out, fixture.err = os.MkdirTemp("", "images-fixture-"); fixture.err != nil {
			return
		}
		fixture.built = testRelease(t, fixture.out, filepath.Join(fixture.out, "cosign.key"), testCA(t))
	})
	if fixture.err != nil || fixture.built == nil {
		t.Fatalf("release fixture: %v", fixture.err)
	}
	return fixture.out, fixture.built
}

// copyTree copies a folder (a layout) so a test can tamper with its copy.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	err := filepath.Walk(src, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		target := filepath.Join(dst, rel)
		if info.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// TestRelease_reproducible builds the release twice into two folders (two
// compilations, two keys) and wants the same image digests, tarballs and
// SBOMs; a third build into the first folder must change no file at all
// (the still-valid signatures are kept).
func TestRelease_reproducible(t *testing.T) {
	ca := testCA(t)
	outA, a := releaseFixture(t)
	outB := t.TempDir()
	b := testRelease(t, outB, filepath.Join(outB, "cosign.key"), ca)
	if a[0].Digest != b[0].Digest {
		t.Fatalf("same inputs, different index digests: %s and %s", a[0].Digest, b[0].Digest)
	}
	for _, f := range []string{"amd64/hello.tar", "arm64/hello.tar", "sbom/hello_amd64.spdx.json", "sbom/hello_arm64.spdx.json", "images.txt"} {
		if !bytes.Equal(readFile(t, filepath.Join(outA, f)), readFile(t, filepath.Join(outB, f))) {
			t.Errorf("%s differs between two builds", f)
		}
	}
	before := readFile(t, filepath.Join(outA, "oci", "index.json"))
	testRelease(t, outA, filepath.Join(outA, "cosign.key"), ca)
	if after := readFile(t, filepath.Join(outA, "oci", "index.json")); !bytes.Equal(before, after) {
		t.Errorf("rebuilding into the same folder changed the layout:\n%s\n%s", before, after)
	}
}

// TestRelease_layout checks what the layout and tarballs hold: an index
// with both platforms and the OCI annotations, config platforms that
// ctr's import filter accepts, and an SBOM listing the binary's modules.
func TestRelease_layout(t *testing.T) {
	out, built := releaseFixture(t)
	b := built[0]
	m, err := b.Index.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Manifests) != 2 || m.Manifests[0].Platform.Architecture != "amd64" || m.Manifests[1].Platform.Architecture != "arm64" {
		t.Fatalf("platforms: %+v", m.Manifests)
	}
	for k, want := range map[string]string{annSource: defaultSource, annRevision: "0123456789abcdef", annVersion: "1.2.3", annCreated: "2025-11-24T16:00:00Z"} {
		if m.Annotations[k] != want {
			t.Errorf("index annotation %s = %q, want %q", k, m.Annotations[k], want)
		}
	}
	for arch, img := range b.Platforms {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		if cf.OS != "linux" || cf.Architecture != arch || cf.Config.User != "65532:65532" || cf.Config.Labels[annRevision] != "0123456789abcdef" {
			t.Errorf("%s config: os %s arch %s user %s labels %v", arch, cf.OS, cf.Architecture, cf.Config.User, cf.Config.Labels)
		}
	}
	var doc spdxDocument
	if err := json.Unmarshal(readFile(t, filepath.Join(out, "sbom", "hello_arm64.spdx.json")), &doc); err != nil {
		t.Fatal(err)
	}
	var purls []string
	for _, p := range doc.Packages {
		for _, r := range p.ExternalRefs {
			purls = append(purls, r.Locator)
		}
	}
	if !strings.Contains(strings.Join(purls, " "), "pkg:golang/github.com/google/go-containerregistry@v0.22.1") {
		t.Errorf("SBOM lacks the binary's dependency: %v", purls)
	}
	if doc.CreationInfo.Created != "2025-11-24T16:00:00Z" {
		t.Errorf("SBOM created %s, want the commit time", doc.CreationInfo.Created)
	}
	if _, err := os.Stat(filepath.Join(out, "amd64", "hello.tar")); err != nil {
		t.Error(err)
	}
	// The layout names references as people write them, attachments too.
	p, err := layout.FromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	root, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := layoutRefs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"sluice-gitops/hello:1.2.3", "sluice-gitops/hello:sha256-" + b.Digest.Hex + ".sig"} {
		if _, ok := refs[want]; !ok {
			t.Errorf("layout lacks %s; has %v", want, refs)
		}
	}
}

// TestVerify_accepts checks a fresh layout and its chart references.
func TestVerify_accepts(t *testing.T) {
	out, _ := releaseFixture(t)
	v, err := LoadVerifier(filepath.Join(out, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyLayout(filepath.Join(out, "oci"), v, []string{"sluice-gitops/hello:1.2.3"})
	if err != nil {
		t.Fatal(err)
	}
	// index + 2 platforms + 2 SBOMs
	if rep.Signatures != 5 || rep.SBOMs != 2 {
		t.Errorf("report: %+v", rep)
	}
}

// wantProblem runs verification and wants it to fail naming want.
func wantProblem(t *testing.T, dir, pub string, refs []string, want string) {
	t.Helper()
	v, err := LoadVerifier(pub)
	if err != nil {
		t.Fatal(err)
	}
	_, err = VerifyLayout(dir, v, refs)
	var ve *VerifyError
	if !errors.As(err, &ve) {
		t.Fatalf("verification passed or failed oddly: %v", err)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("verification failed, but not with %q:\n%v", want, err)
	}
}

func TestVerify_refusesChangedLayer(t *testing.T) {
	out, built := releaseFixture(t)
	dir := copyTree(t, filepath.Join(out, "oci"))
	layers, err := built[0].Platforms["amd64"].Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := layers[len(layers)-1].Digest()
	if err != nil {
		t.Fatal(err)
	}
	blob := filepath.Join(dir, "blobs", d.Algorithm, d.Hex)
	b := readFile(t, blob)
	b[len(b)/2] ^= 0xff
	if err := os.WriteFile(blob, b, 0o644); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, dir, filepath.Join(out, "cosign.pub"), nil, "content does not match its digests")
}

// TestVerify_refusesChangedAnnotation rewrites the index with another
// version annotation (a consistent layout: new digest, index.json
// updated) and wants the signature check to catch it.
func TestVerify_refusesChangedAnnotation(t *testing.T) {
	out, built := releaseFixture(t)
	dir := copyTree(t, filepath.Join(out, "oci"))
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref := built[0].Ref.String()
	forged := mutate.Annotations(built[0].Index, map[string]string{annVersion: "9.9.9"}).(v1.ImageIndex)
	err = p.ReplaceIndex(forged, match.Annotation(annRefName, ref), layout.WithAnnotations(map[string]string{annRefName: ref}))
	if err != nil {
		t.Fatal(err)
	}
	wantProblem(t, dir, filepath.Join(out, "cosign.pub"), nil, "no signature for")
}

// TestVerify_refusesMovedSignature copies a valid signature onto the tag
// of another digest: the payload names the original digest.
func TestVerify_refusesMovedSignature(t *testing.T) {
	out, built := releaseFixture(t)
	dir := copyTree(t, filepath.Join(out, "oci"))
	p, err := layout.FromPath(dir)
	if err != nil {
		t.Fatal(err)
	}
	root, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	refs, err := layoutRefs(root)
	if err != nil {
		t.Fatal(err)
	}
	repo := built[0].Ref.Context()
	amd, _ := built[0].Platforms["amd64"].Digest()
	indexSig := refs[layoutRef(SignatureTag(repo, built[0].Digest))]
	amdTag := layoutRef(SignatureTag(repo, amd))
	indexSig.Annotations = map[string]string{annRefName: amdTag}
	if err := p.RemoveDescriptors(match.Annotation(annRefName, amdTag)); err != nil {
		t.Fatal(err)
	}
	if err := p.AppendDescriptor(indexSig); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, dir, filepath.Join(out, "cosign.pub"), nil, "not this digest")
}

func TestVerify_refusesOtherKey(t *testing.T) {
	out, _ := releaseFixture(t)
	other := t.TempDir()
	if _, err := EnsureKeyPair(filepath.Join(other, "k"), filepath.Join(other, "k.pub")); err != nil {
		t.Fatal(err)
	}
	wantProblem(t, filepath.Join(out, "oci"), filepath.Join(other, "k.pub"), nil, "does not verify with the public key")
}

func TestVerify_refusesMissingChartReference(t *testing.T) {
	out, _ := releaseFixture(t)
	wantProblem(t, filepath.Join(out, "oci"), filepath.Join(out, "cosign.pub"), []string{"sluice-gitops/operator:1.2.3"}, "not in the layout")
}

func TestVerify_badInput(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	if err := run([]string{"verify", "-layout", dir, "-pub", filepath.Join(dir, "absent.pub"), "-chart", ""}, &stdout, &stderr); err == nil {
		t.Error("verify without a key passed")
	}
	pub := filepath.Join(dir, "k.pub")
	if _, err := EnsureKeyPair(filepath.Join(dir, "k"), pub); err != nil {
		t.Fatal(err)
	}
	var ve *VerifyError
	if err := run([]string{"verify", "-layout", filepath.Join(dir, "no-layout"), "-pub", pub, "-chart", ""}, &stdout, &stderr); !errors.As(err, &ve) {
		t.Errorf("verify of a missing layout: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "garbage.pub"), []byte("not pem"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ke *KeyError
	if err := run([]string{"verify", "-pub", filepath.Join(dir, "garbage.pub")}, &stdout, &stderr); !errors.As(err, &ke) {
		t.Errorf("verify with a garbage key: %v", err)
	}
}

// TestRelease_refusesBadKey: a given key that is missing or not a key
// stops the release before anything is built; no key is made up for it.
func TestRelease_refusesBadKey(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run([]string{"release", "-out", out, "-epoch", "1", "-tag", "1", "-key", filepath.Join(out, "absent.key")}, &stdout, &stderr)
	var ke *KeyError
	if !errors.As(err, &ke) {
		t.Fatalf("release with a missing key: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "absent.key")); !errors.Is(err, os.ErrNotExist) {
		t.Error("a key was created for a given path")
	}
	if err := run([]string{"release", "-out", out, "-tag", "1"}, &stdout, &stderr); err == nil || !strings.Contains(err.Error(), "epoch") {
		t.Errorf("release without -epoch: %v", err)
	}
	if err := run([]string{"release", "-out", out, "-epoch", "1", "-tag", "1", "-terraform", "amd64"}, &stdout, &stderr); err == nil {
		t.Error("release with a bad -terraform passed")
	}
}

// TestChartDefaultRefs reads the real chart: its three images at
// appVersion, the README's sidecar image among them.
func TestChartDefaultRefs(t *testing.T) {
	refs, err := ChartDefaultRefs("../../charts/sluice")
	if err != nil {
		t.Fatal(err)
	}
	v, err := ChartAppVersion("../../charts/sluice")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"sluice-gitops/gitops-syncer:" + v, "sluice-gitops/infra-validator:" + v, "sluice-gitops/operator:" + v}
	if strings.Join(refs, " ") != strings.Join(want, " ") {
		t.Errorf("refs = %v, want %v", refs, want)
	}
	for _, r := range SluiceImages(nil) {
		if _, err := name.NewTag(r.Repo + ":" + v); err != nil {
			t.Error(err)
		}
	}
	var ce *ChartError
	if _, err := ChartDefaultRefs(t.TempDir()); !errors.As(err, &ce) {
		t.Errorf("empty chart folder: %v", err)
	}
}

// TestSignatureImage_isCosignShaped pins the shape cosign reads.
func TestSignatureImage_isCosignShaped(t *testing.T) {
	out, built := releaseFixture(t)
	p, err := layout.FromPath(filepath.Join(out, "oci"))
	if err != nil {
		t.Fatal(err)
	}
	root, _ := p.ImageIndex()
	refs, _ := layoutRefs(root)
	d := refs[layoutRef(SignatureTag(built[0].Ref.Context(), built[0].Digest))]
	img, err := root.Image(d.Digest)
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if m.MediaType != types.OCIManifestSchema1 || len(m.Layers) != 1 || m.Layers[0].MediaType != SimpleSigningMediaType ||
		m.Layers[0].Annotations[SignatureAnnotation] == "" {
		t.Fatalf("signature manifest: %+v", m)
	}
	l, _ := img.LayerByDigest(m.Layers[0].Digest)
	rc, _ := l.Compressed()
	var pl map[string]any
	if err := json.NewDecoder(rc).Decode(&pl); err != nil {
		t.Fatal(err)
	}
	crit := pl["critical"].(map[string]any)
	if crit["type"] != "cosign container image signature" ||
		crit["image"].(map[string]any)["docker-manifest-digest"] != built[0].Digest.String() {
		t.Errorf("payload: %v", pl)
	}
}
