package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/sigstore/sigstore/pkg/signature"
)

// layoutEntry is one reference of the OCI layout: an image index or an
// image (signatures and SBOMs).
type layoutEntry struct {
	ref   string
	index v1.ImageIndex
	image v1.Image
}

// writeRelease writes the OCI layout (through a new folder swapped in at
// the end, so a failed run leaves the last good layout), the SBOM files,
// the per-arch tarballs, and a summary.
func writeRelease(o ReleaseOptions, signer signature.SignerVerifier, built []BuiltImage) error {
	ociDir := filepath.Join(o.Out, "oci")
	old := oldSignatures(ociDir, signer)
	var entries []layoutEntry
	for _, b := range built {
		es, err := releaseEntries(signer, old, b)
		if err != nil {
			return err
		}
		entries = append(entries, es...)
	}
	if err := writeLayout(ociDir, entries); err != nil {
		return err
	}
	for i, b := range built {
		if err := writeSideFiles(o, o.Images[i], b); err != nil {
			return err
		}
	}
	return writeSummary(o, built)
}

// releaseEntries lists the layout entries of one image: the index, the
// signatures of the index and of each platform manifest (what
// `cosign sign --recursive` makes), and each platform's SBOM with its
// signature.
func releaseEntries(signer signature.SignerVerifier, old map[string]v1.Image, b BuiltImage) ([]layoutEntry, error) {
	repo := b.Ref.Context()
	entries := []layoutEntry{{ref: layoutRef(b.Ref), index: b.Index}}
	sign := func(d v1.Hash) error {
		tag := layoutRef(SignatureTag(repo, d))
		if img, ok := old[tag]; ok {
			// ECDSA signatures are randomised: keep a still-valid one so
			// that rebuilding an unchanged commit changes no file.
			if VerifySignatureImage(signer, img, repo, d) == nil {
				entries = append(entries, layoutEntry{ref: tag, image: img})
				return nil
			}
		}
		img, err := SignatureImage(signer, repo, d)
		if err != nil {
			return err
		}
		entries = append(entries, layoutEntry{ref: tag, image: img})
		return nil
	}
	if err := sign(b.Digest); err != nil {
		return nil, err
	}
	for _, arch := range sortedArches(b.Platforms) {
		d, err := b.Platforms[arch].Digest()
		if err != nil {
			return nil, err
		}
		if err := sign(d); err != nil {
			return nil, err
		}
		sbom, err := SBOMImage(b.SBOMs[arch])
		if err != nil {
			return nil, err
		}
		entries = append(entries, layoutEntry{ref: layoutRef(SBOMTag(repo, d)), image: sbom})
		sd, err := sbom.Digest()
		if err != nil {
			return nil, err
		}
		if err := sign(sd); err != nil {
			return nil, err
		}
	}
	return entries, nil
}

// oldSignatures reads the signature images of an earlier layout, by
// reference; none when there is no readable layout.
func oldSignatures(dir string, v signature.Verifier) map[string]v1.Image {
	out := map[string]v1.Image{}
	p, err := layout.FromPath(dir)
	if err != nil {
		return out
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return out
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return out
	}
	for _, d := range m.Manifests {
		ref := d.Annotations[annRefName]
		if !strings.HasSuffix(ref, ".sig") {
			continue
		}
		if img, err := idx.Image(d.Digest); err == nil {
			out[ref] = img
		}
	}
	return out
}

// writeLayout writes entries, sorted by reference, into a fresh layout and
// swaps it in for dir.
func writeLayout(dir string, entries []layoutEntry) error {
	sort.Slice(entries, func(i, j int) bool { return entries[i].ref < entries[j].ref })
	tmp := dir + ".new"
	if err := os.RemoveAll(tmp); err != nil {
		return err
	}
	p, err := layout.Write(tmp, empty.Index)
	if err != nil {
		return fmt.Errorf("layout %s: %w", tmp, err)
	}
	for _, e := range entries {
		opt := layout.WithAnnotations(map[string]string{annRefName: e.ref})
		if e.index != nil {
			err = p.AppendIndex(e.index, opt)
		} else {
			err = p.AppendImage(e.image, opt)
		}
		if err != nil {
			return fmt.Errorf("layout: write %s: %w", e.ref, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}

// writeSideFiles writes the per-arch docker-archive tarballs (what
// `ctr -n k8s.io images import` loads) and the SBOM files, and removes a
// tarball left from an earlier run for an arch no longer built.
func writeSideFiles(o ReleaseOptions, ri ReleaseImage, b BuiltImage) error {
	for _, arch := range o.Arches {
		tarPath := filepath.Join(o.Out, arch, ri.Name+".tar")
		sbomPath := filepath.Join(o.Out, "sbom", ri.Name+"_"+arch+".spdx.json")
		img, ok := b.Platforms[arch]
		if !ok {
			for _, p := range []string{tarPath, sbomPath} {
				if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
					return err
				}
			}
			continue
		}
		if err := writeTarball(tarPath, b.Ref, img); err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(sbomPath), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(sbomPath, b.SBOMs[arch], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// writeSummary writes images.txt (reference, digest, platforms, one image
// a line) and prints it with what was skipped.
func writeSummary(o ReleaseOptions, built []BuiltImage) error {
	var sb strings.Builder
	for _, b := range built {
		var plats []string
		for _, a := range sortedArches(b.Platforms) {
			plats = append(plats, "linux/"+a)
		}
		fmt.Fprintf(&sb, "%s@%s %s\n", b.Ref, b.Digest, strings.Join(plats, ","))
	}
	if err := os.WriteFile(filepath.Join(o.Out, "images.txt"), []byte(sb.String()), 0o644); err != nil {
		return err
	}
	fmt.Fprint(o.Log, sb.String())
	for _, b := range built {
		for _, s := range b.Skipped {
			fmt.Fprintf(o.Log, "images: %s not built for %s\n", b.Ref, s)
		}
	}
	return nil
}

// refRepo returns the repository of a layout reference.
func refRepo(ref string) (name.Repository, error) {
	t, err := name.NewTag(ref)
	if err != nil {
		return name.Repository{}, err
	}
	return t.Context(), nil
}
