package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"github.com/sigstore/sigstore/pkg/signature"
)

// VerifyError lists every problem verification found.
type VerifyError struct{ Problems []string }

func (e *VerifyError) Error() string {
	return fmt.Sprintf("%d problem(s):\n  %s", len(e.Problems), strings.Join(e.Problems, "\n  "))
}

// VerifyReport says what verification checked.
type VerifyReport struct {
	Images     map[string]string   // reference -> index digest
	Platforms  map[string][]string // reference -> linux/<arch>
	Signatures int
	SBOMs      int
}

// layoutRefs maps each reference of a layout to its descriptor.
func layoutRefs(idx v1.ImageIndex) (map[string]v1.Descriptor, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	refs := map[string]v1.Descriptor{}
	for _, d := range m.Manifests {
		if r := d.Annotations[annRefName]; r != "" {
			refs[r] = d
		}
	}
	return refs, nil
}

// isAttachment tells signature and SBOM tags from image tags.
func isAttachment(ref string) bool {
	return strings.HasSuffix(ref, ".sig") || strings.HasSuffix(ref, ".sbom")
}

// VerifyLayout checks an OCI layout: every blob of every image matches its
// digest, every image index and each of its platform manifests carries a
// signature by verifier for exactly that digest, each platform has a
// signed SPDX SBOM, and each of wantRefs is an image of the layout.
func VerifyLayout(dir string, verifier signature.Verifier, wantRefs []string) (*VerifyReport, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, &VerifyError{Problems: []string{fmt.Sprintf("layout %s: %v", dir, err)}}
	}
	root, err := p.ImageIndex()
	if err != nil {
		return nil, &VerifyError{Problems: []string{fmt.Sprintf("layout %s: %v", dir, err)}}
	}
	refs, err := layoutRefs(root)
	if err != nil {
		return nil, &VerifyError{Problems: []string{fmt.Sprintf("layout %s: %v", dir, err)}}
	}
	v := &verifier2{root: root, refs: refs, verifier: verifier,
		report: &VerifyReport{Images: map[string]string{}, Platforms: map[string][]string{}}}
	names := make([]string, 0, len(refs))
	for r := range refs {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		if !isAttachment(r) {
			v.checkImage(r)
		}
	}
	for _, want := range wantRefs {
		if _, ok := v.report.Images[canonical(want)]; !ok {
			v.problem("%s: the chart's default reference is not in the layout", want)
		}
	}
	if len(v.report.Images) == 0 {
		v.problem("no image in the layout")
	}
	if len(v.problems) > 0 {
		return v.report, &VerifyError{Problems: v.problems}
	}
	return v.report, nil
}

// canonical renders a reference the way the layout names it.
func canonical(ref string) string {
	t, err := name.NewTag(ref)
	if err != nil {
		return ref
	}
	return layoutRef(t)
}

// verifier2 carries one verification's state.
type verifier2 struct {
	root     v1.ImageIndex
	refs     map[string]v1.Descriptor
	verifier signature.Verifier
	report   *VerifyReport
	problems []string
}

func (v *verifier2) problem(format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

// checkImage verifies one image index and its platforms.
func (v *verifier2) checkImage(ref string) {
	desc := v.refs[ref]
	repo, err := refRepo(ref)
	if err != nil {
		v.problem("%s: %v", ref, err)
		return
	}
	if desc.MediaType != types.OCIImageIndex {
		v.problem("%s: %s, want an image index", ref, desc.MediaType)
		return
	}
	idx, err := v.root.ImageIndex(desc.Digest)
	if err != nil {
		v.problem("%s: %v", ref, err)
		return
	}
	// Every blob against its digest: a changed layer, config or manifest
	// shows here even when index.json was not touched.
	if err := validate.Index(idx); err != nil {
		v.problem("%s: content does not match its digests: %v", ref, firstLine(err.Error()))
		return
	}
	v.report.Images[ref] = desc.Digest.String()
	v.checkSignature(ref, repo, desc.Digest)
	m, err := idx.IndexManifest()
	if err != nil {
		v.problem("%s: %v", ref, err)
		return
	}
	for _, pd := range m.Manifests {
		plat := "unknown"
		if pd.Platform != nil {
			plat = pd.Platform.OS + "/" + pd.Platform.Architecture
		}
		v.report.Platforms[ref] = append(v.report.Platforms[ref], plat)
		v.checkSignature(ref+" "+plat, repo, pd.Digest)
		v.checkSBOM(ref+" "+plat, repo, pd.Digest)
	}
}

// checkSignature finds and verifies the signature of repo@digest.
func (v *verifier2) checkSignature(what string, repo name.Repository, d v1.Hash) {
	tag := layoutRef(SignatureTag(repo, d))
	sd, ok := v.refs[tag]
	if !ok {
		v.problem("%s: no signature for %s (%s)", what, d, tag)
		return
	}
	img, err := v.root.Image(sd.Digest)
	if err != nil {
		v.problem("%s: signature %s: %v", what, tag, err)
		return
	}
	if err := checkArtifact(img, sd.Digest); err != nil {
		v.problem("%s: signature %s: content does not match its digests: %v", what, tag, err)
		return
	}
	if err := VerifySignatureImage(v.verifier, img, repo, d); err != nil {
		v.problem("%s: %v", what, err)
		return
	}
	v.report.Signatures++
}

// checkSBOM finds the SBOM of a platform manifest, checks its signature
// and that it is an SPDX document.
func (v *verifier2) checkSBOM(what string, repo name.Repository, d v1.Hash) {
	tag := layoutRef(SBOMTag(repo, d))
	sd, ok := v.refs[tag]
	if !ok {
		v.problem("%s: no SBOM (%s)", what, tag)
		return
	}
	img, err := v.root.Image(sd.Digest)
	if err != nil {
		v.problem("%s: SBOM: %v", what, err)
		return
	}
	if err := checkArtifact(img, sd.Digest); err != nil {
		v.problem("%s: SBOM %s: content does not match its digests: %v", what, tag, err)
		return
	}
	v.checkSignature(what+" SBOM", repo, sd.Digest)
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		v.problem("%s: SBOM: want one layer", what)
		return
	}
	rc, err := layers[0].Compressed()
	if err != nil {
		v.problem("%s: SBOM: %v", what, err)
		return
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		v.problem("%s: SBOM: %v", what, err)
		return
	}
	var doc spdxDocument
	if err := json.Unmarshal(b, &doc); err != nil || doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) < 2 {
		v.problem("%s: SBOM is not an SPDX 2.3 document with packages", what)
		return
	}
	v.report.SBOMs++
}

// firstLine keeps error reports short.
func firstLine(s string) string {
	first, _, _ := strings.Cut(s, "\n")
	return first
}

// checkArtifact checks a signature or SBOM image against its digests: the
// manifest, the config and each layer blob. (validate.Image wants layers
// that unpack as file systems, which these are not.)
func checkArtifact(img v1.Image, want v1.Hash) error {
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	if d, _, err := v1.SHA256(bytes.NewReader(raw)); err != nil || d != want {
		return fmt.Errorf("manifest digest %s, want %s", d, want)
	}
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	cfg, err := img.RawConfigFile()
	if err != nil {
		return err
	}
	if d, _, err := v1.SHA256(bytes.NewReader(cfg)); err != nil || d != m.Config.Digest {
		return fmt.Errorf("config digest %s, want %s", d, m.Config.Digest)
	}
	for _, ld := range m.Layers {
		l, err := img.LayerByDigest(ld.Digest)
		if err != nil {
			return err
		}
		rc, err := l.Compressed()
		if err != nil {
			return err
		}
		d, _, err := v1.SHA256(rc)
		rc.Close()
		if err != nil || d != ld.Digest {
			return fmt.Errorf("layer digest %s, want %s", d, ld.Digest)
		}
	}
	return nil
}
