package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/sigstore/sigstore/pkg/signature"
)

// Binary is a Go main package compiled into an image.
type Binary struct {
	Pkg string // relative to the release root, e.g. ./operator/cmd/operator
	Dst string // absolute path in the image
}

// HostFile is a prebuilt file copied into an image, per architecture; an
// image is built only for the architectures all its host files have.
type HostFile struct {
	Dst    string
	ByArch map[string]string
	Go     bool // a Go binary: checked static and listed in the SBOM
}

// ReleaseImage is one image of a release.
type ReleaseImage struct {
	Name       string // file names: <arch>/<Name>.tar, sbom/<Name>_<arch>.spdx.json
	Repo       string // e.g. sluice-gitops/operator
	Binaries   []Binary
	Host       []HostFile
	Entrypoint []string
	Why        string // one line for the summary
}

// SluiceImages are the images the chart runs. The operator image is also
// the Argo CD repo-server sidecar's (charts/sluice/README.md): the plugin
// command is `operator`, found on PATH, and the sidecar's entrypoint is
// Argo CD's argocd-cmp-server from a shared volume.
func SluiceImages(terraform map[string]string) []ReleaseImage {
	return []ReleaseImage{
		{
			Name: "operator", Repo: "sluice-gitops/operator",
			Binaries:   []Binary{{Pkg: "./operator/cmd/operator", Dst: "/usr/local/bin/operator"}},
			Entrypoint: []string{"/usr/local/bin/operator"},
			Why:        "operator Deployment; Argo CD repo-server sidecar (plugin command `operator`)",
		},
		{
			Name: "gitops-syncer", Repo: "sluice-gitops/gitops-syncer",
			Binaries:   []Binary{{Pkg: "./gitops-syncer/cmd/gitops-syncer", Dst: "/usr/local/bin/gitops-syncer"}},
			Entrypoint: []string{"/usr/local/bin/gitops-syncer"},
			Why:        "syncer Deployment",
		},
		{
			Name: "infra-validator", Repo: "sluice-gitops/infra-validator",
			Binaries:   []Binary{{Pkg: "./infra-validator/cmd/infra-validator", Dst: "/usr/local/bin/infra-validator"}},
			Host:       []HostFile{{Dst: "/usr/local/bin/terraform", ByArch: terraform, Go: true}},
			Entrypoint: []string{"/usr/local/bin/infra-validator"},
			Why:        "runner workload (`infra-validator runner serve`, terraform at /usr/local/bin/terraform)",
		},
	}
}

// ReleaseOptions says what to build and where.
type ReleaseOptions struct {
	Root         string // the repository (go.work) root
	Out          string // output folder, e.g. bin/images
	Tag          string // image tag, the chart's appVersion
	StampVersion string // -X <VersionPkg>.Version
	Commit       string // revision: -X <VersionPkg>.Commit and the annotation
	VersionPkg   string // package holding Version, Commit, Date; empty: no stamp
	Created      time.Time
	Source       string // org.opencontainers.image.source
	Arches       []string
	CABundle     string
	KeyPath      string
	PubPath      string
	GenerateKey  bool // create KeyPath when missing (local builds only)
	Images       []ReleaseImage
	Log          io.Writer
}

// BuiltImage is one image of a finished release.
type BuiltImage struct {
	Ref       name.Tag
	Index     v1.ImageIndex
	Digest    v1.Hash
	Platforms map[string]v1.Image // by arch
	SBOMs     map[string][]byte   // by arch
	Skipped   []string            // arches not built, with why
}

// Release builds every image for every architecture it can, signs them,
// attaches SBOMs, and writes the OCI layout and the per-arch tarballs.
func Release(o ReleaseOptions) ([]BuiltImage, error) {
	for _, a := range o.Arches {
		if err := checkArch(a); err != nil {
			return nil, err
		}
	}
	signer, err := releaseSigner(o)
	if err != nil {
		return nil, err
	}
	var built []BuiltImage
	for _, ri := range o.Images {
		b, err := buildReleaseImage(o, ri)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ri.Repo, err)
		}
		built = append(built, b)
	}
	if err := writeRelease(o, signer, built); err != nil {
		return nil, err
	}
	return built, nil
}

// releaseSigner loads the signing key, creating a local one when allowed,
// and writes its public key next to it when PubPath is missing.
func releaseSigner(o ReleaseOptions) (signature.SignerVerifier, error) {
	if o.GenerateKey {
		created, err := EnsureKeyPair(o.KeyPath, o.PubPath)
		if err != nil {
			return nil, err
		}
		if created {
			fmt.Fprintf(o.Log, "images: created a local signing key %s (public %s); a release passes its own\n", o.KeyPath, o.PubPath)
		}
	}
	signer, err := LoadSigner(o.KeyPath)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(o.PubPath); errors.Is(err, os.ErrNotExist) {
		if err := WritePublicKey(signer, o.PubPath); err != nil {
			return nil, &KeyError{Path: o.PubPath, Err: err}
		}
	}
	return signer, nil
}

// ldflags stamps the version the way the Makefile does, with the commit
// time as the build date so that builds repeat, and strips the symbol
// table (not the build information the SBOM reads).
func (o ReleaseOptions) ldflags() string {
	flags := "-s -w"
	if o.VersionPkg != "" {
		flags += fmt.Sprintf(" -X %s.Version=%s -X %s.Commit=%s -X %s.Date=%s",
			o.VersionPkg, o.StampVersion, o.VersionPkg, o.Commit, o.VersionPkg, o.Created.UTC().Format(time.RFC3339))
	}
	return flags
}

// annotations are the OCI annotations of every manifest and index.
func (o ReleaseOptions) annotations(title string) map[string]string {
	return map[string]string{
		annSource:   o.Source,
		annRevision: o.Commit,
		annVersion:  o.Tag,
		annCreated:  o.Created.UTC().Format(time.RFC3339),
		annTitle:    title,
	}
}

// buildReleaseImage compiles the binaries and builds the image for each
// architecture its host files allow, then the index.
func buildReleaseImage(o ReleaseOptions, ri ReleaseImage) (BuiltImage, error) {
	ref, err := name.NewTag(ri.Repo + ":" + o.Tag)
	if err != nil {
		return BuiltImage{}, &UsageError{Msg: fmt.Sprintf("image reference %s:%s: %v", ri.Repo, o.Tag, err)}
	}
	b := BuiltImage{Ref: ref, Platforms: map[string]v1.Image{}, SBOMs: map[string][]byte{}}
	for _, arch := range o.Arches {
		if missing := missingHostFiles(ri, arch); missing != "" {
			b.Skipped = append(b.Skipped, fmt.Sprintf("linux/%s: no %s for it", arch, missing))
			continue
		}
		img, sbom, err := buildPlatform(o, ri, arch)
		if err != nil {
			return BuiltImage{}, err
		}
		b.Platforms[arch], b.SBOMs[arch] = img, sbom
	}
	if len(b.Platforms) == 0 {
		return BuiltImage{}, fmt.Errorf("no architecture could be built: %s", strings.Join(b.Skipped, "; "))
	}
	if b.Index, err = BuildIndex(b.Platforms, o.annotations(ri.Repo)); err != nil {
		return BuiltImage{}, err
	}
	if b.Digest, err = b.Index.Digest(); err != nil {
		return BuiltImage{}, err
	}
	return b, nil
}

// missingHostFiles names the first host file the image lacks for arch.
func missingHostFiles(ri ReleaseImage, arch string) string {
	for _, h := range ri.Host {
		if h.ByArch[arch] == "" {
			return path.Base(h.Dst)
		}
	}
	return ""
}

// buildPlatform compiles and assembles one linux/arch image and its SBOM.
func buildPlatform(o ReleaseOptions, ri ReleaseImage, arch string) (v1.Image, []byte, error) {
	spec := ImageSpec{
		Arch: arch, Entrypoint: ri.Entrypoint, User: "65532:65532", Base: true, CABundle: o.CABundle,
		Created: o.Created, Annotations: o.annotations(ri.Repo),
	}
	var sbomBins []sbomBinary
	for _, bin := range ri.Binaries {
		out := filepath.Join(o.Out, "build", arch, path.Base(bin.Dst))
		t0 := time.Now()
		if err := GoBuild(o.Root, bin.Pkg, arch, o.ldflags(), out); err != nil {
			return nil, nil, err
		}
		fmt.Fprintf(o.Log, "images: go build %s linux/%s: %.1f s\n", bin.Pkg, arch, time.Since(t0).Seconds())
		spec.Files = append(spec.Files, FileSpec{Dst: bin.Dst, Src: out})
		sbomBins = append(sbomBins, sbomBinary{Dst: bin.Dst, Src: out})
	}
	for _, h := range ri.Host {
		src := h.ByArch[arch]
		if err := CheckBinary(src, arch); err != nil {
			return nil, nil, err
		}
		spec.Files = append(spec.Files, FileSpec{Dst: h.Dst, Src: src})
		if h.Go {
			sbomBins = append(sbomBins, sbomBinary{Dst: h.Dst, Src: src})
		}
	}
	img, err := BuildImage(spec)
	if err != nil {
		return nil, nil, err
	}
	sbom, err := BuildSBOM(ri.Repo+":"+o.Tag, arch, o.Created, sbomBins)
	if err != nil {
		return nil, nil, err
	}
	return img, sbom, nil
}

// sortedArches lists the keys of a per-arch map in order.
func sortedArches[T any](m map[string]T) []string {
	arches := make([]string, 0, len(m))
	for a := range m {
		arches = append(arches, a)
	}
	sort.Strings(arches)
	return arches
}
