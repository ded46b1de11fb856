package main

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"
)

// SPDX 2.3 JSON, the subset an image SBOM needs.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo,omitempty"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	PrimaryPurpose   string            `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxChecksum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
	Comment          string            `json:"comment,omitempty"`
}

type spdxChecksum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExternalRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SBOMError reports a binary whose Go build information cannot be read.
type SBOMError struct {
	Path string
	Err  error
}

func (e *SBOMError) Error() string { return fmt.Sprintf("sbom: build info of %s: %v", e.Path, e.Err) }

func (e *SBOMError) Unwrap() error { return e.Err }

// sbomBinary is one Go binary of an image: where it is in the image and
// on the host.
type sbomBinary struct {
	Dst, Src string
}

// spdxID makes a stable SPDX identifier from any string.
func spdxID(kind, s string) string {
	h := sha256.Sum256([]byte(s))
	return "SPDXRef-" + kind + "-" + hex.EncodeToString(h[:8])
}

// purl is the package URL of a Go module.
func purl(path, version string) string {
	return "pkg:golang/" + path + "@" + version
}

// BuildSBOM writes an SPDX 2.3 document for one image from the build
// information of its Go binaries (runtime/debug.BuildInfo read from the
// files): the image, each binary with its checksum, its main module, Go
// itself, and every dependency module (replacements resolved). Every value
// comes from the inputs, so the same binaries give the same bytes.
func BuildSBOM(imageRef, arch string, created time.Time, bins []sbomBinary) ([]byte, error) {
	imgID := "SPDXRef-Image"
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:         imageRef + " linux/" + arch,
		CreationInfo: spdxCreationInfo{Created: created.UTC().Format(time.RFC3339), Creators: []string{"Tool: sluice-hack-images"}},
		Packages: []spdxPackage{{
			Name: imageRef, SPDXID: imgID, DownloadLocation: "NOASSERTION", PrimaryPurpose: "CONTAINER",
			Comment: "linux/" + arch,
		}},
		Relationships: []spdxRelationship{{Element: "SPDXRef-DOCUMENT", Type: "DESCRIBES", Related: imgID}},
	}
	seen := map[string]bool{}
	nsHash := sha256.New()
	for _, b := range bins {
		sum, err := fileSHA256(b.Src)
		if err != nil {
			return nil, &SBOMError{Path: b.Src, Err: err}
		}
		fmt.Fprintf(nsHash, "%s %s\n", b.Dst, sum)
		info, err := buildinfo.ReadFile(b.Src)
		if err != nil {
			return nil, &SBOMError{Path: b.Src, Err: err}
		}
		binID := spdxID("Binary", b.Dst)
		doc.Packages = append(doc.Packages, spdxPackage{
			Name: b.Dst, SPDXID: binID, VersionInfo: info.Main.Version, DownloadLocation: "NOASSERTION",
			PrimaryPurpose: "APPLICATION", Checksums: []spdxChecksum{{Algorithm: "SHA256", Value: sum}},
			Comment: "Go " + info.GoVersion + "; main package " + info.Path + "; " + buildSettings(info),
		})
		doc.Relationships = append(doc.Relationships, spdxRelationship{Element: imgID, Type: "CONTAINS", Related: binID})
		mods := [][2]string{{info.Main.Path, info.Main.Version}, {"stdlib", info.GoVersion}}
		for _, d := range info.Deps {
			if d.Replace != nil {
				d = d.Replace
			}
			mods = append(mods, [2]string{d.Path, d.Version})
		}
		for _, m := range mods {
			id := spdxID("Module", m[0]+"@"+m[1])
			if !seen[id] {
				seen[id] = true
				doc.Packages = append(doc.Packages, spdxPackage{
					Name: m[0], SPDXID: id, VersionInfo: m[1], DownloadLocation: "NOASSERTION",
					PrimaryPurpose: "LIBRARY",
					ExternalRefs:   []spdxExternalRef{{Category: "PACKAGE-MANAGER", Type: "purl", Locator: purl(m[0], m[1])}},
				})
			}
			doc.Relationships = append(doc.Relationships, spdxRelationship{Element: binID, Type: "DEPENDS_ON", Related: id})
		}
	}
	doc.DocumentNamespace = "https://github.com/sluice-gitops/sluice/spdx/" + strings.NewReplacer("/", "-", ":", "-").Replace(imageRef) +
		"-" + arch + "-" + hex.EncodeToString(nsHash.Sum(nil))[:16]
	sort.SliceStable(doc.Packages[1:], func(i, j int) bool { return doc.Packages[1+i].SPDXID < doc.Packages[1+j].SPDXID })
	return json.MarshalIndent(doc, "", "  ")
}

// buildSettings renders the settings that say how a binary was built.
func buildSettings(info *buildinfo.BuildInfo) string {
	var parts []string
	for _, s := range info.Settings {
		parts = append(parts, s.Key+"="+s.Value)
	}
	return strings.Join(parts, " ")
}

// fileSHA256 hashes a file.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
