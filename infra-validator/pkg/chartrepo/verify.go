package chartrepo

// Signatures: a chart fetched by digest is only known to be the bytes the
// repository served under that version. Where the Repository asks for it,
// a chart must also prove who made it before it enters an artifact:
// Helm's provenance file (an OpenPGP clear-signature naming the archive's
// sha256) or a cosign signature of its OCI manifest.

import (
	"bytes"
	"context"
	"crypto"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"helm.sh/helm/v3/pkg/provenance"
	"helm.sh/helm/v3/pkg/registry"
	"oras.land/oras-go/v2/content"
)

// ErrSignature: the chart carries no signature the given keys verify.
var ErrSignature = errors.New("the chart's signature is not verified")

// What cosign writes (cosign's pkg/oci/static and pkg/types): a signature
// is an OCI manifest tagged sha256-<hex>.sig in the signed artifact's
// repository, one layer per signature holding the simple-signing payload,
// the base64 signature in a layer annotation.
const (
	cosignSimpleSigningMediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	cosignSignatureAnnotation    = "dev.cosignproject.cosign/signature"
	// maxSignatureLayers bounds the signatures looked at for one chart.
	maxSignatureLayers = 16
	// maxSignatureSize bounds a provenance file, a signature payload.
	maxSignatureSize = 64 << 10
)

// Provider names how a chart's signature is verified.
type Provider string

const (
	// Provenance: Helm's .prov, by a key of an OpenPGP keyring.
	Provenance Provider = "provenance"
	// Cosign: a cosign signature of the OCI manifest, by a public key.
	Cosign Provider = "cosign"
)

// Verification says which signature a chart must carry and the keys that
// may have made it.
type Verification struct {
	Provider Provider
	// Keyring is an OpenPGP public keyring, binary or armored (Provenance).
	Keyring []byte
	// PublicKeys are PEM public keys (Cosign).
	PublicKeys [][]byte
}

// VerifySignature checks that c, fetched and checked against its digest,
// carries the signature v asks for: for Provenance, the .prov the Helm
// repository serves beside the archive (or the provenance layer of its
// OCI manifest), clear-signed by a key of the keyring and naming the
// archive's sha256; for Cosign (oci:// only), a signature of c's manifest
// digest in its repository's sha256-<hex>.sig, by one of the public keys.
// Everything read is bounded and the Options' credentials and timeout
// apply as for Fetch. A missing or wrong signature is ErrSignature; keys
// that cannot be read are an error naming what is wrong with them.
func VerifySignature(ctx context.Context, c *Chart, v *Verification, opts Options) error {
	if v == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout())
	defer cancel()
	what := fmt.Sprintf("chart %s %s from %s", c.Name, c.Version, c.Repo)
	switch v.Provider {
	case Provenance:
		ring, err := readKeyring(v.Keyring)
		if err != nil {
			return err
		}
		prov, file, err := fetchProvenance(ctx, c, opts)
		if err != nil {
			return err
		}
		return checkProvenance(c.TarGz, prov, file, ring, what)
	case Cosign:
		if !IsOCI(c.Repo) {
			return fmt.Errorf("%s: cosign verifies charts from oci:// registries only", what)
		}
		verifiers, err := cosignVerifiers(v.PublicKeys)
		if err != nil {
			return err
		}
		return checkCosign(ctx, c, verifiers, opts, what)
	}
	return fmt.Errorf("signature provider %q: must be provenance or cosign", v.Provider)
}

// readKeyring parses an OpenPGP public keyring, armored or binary.
func readKeyring(b []byte) (openpgp.EntityList, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, errors.New("keyring: empty")
	}
	var ring openpgp.EntityList
	var err error
	if bytes.HasPrefix(bytes.TrimSpace(b), []byte("-----BEGIN PGP")) {
		ring, err = openpgp.ReadArmoredKeyRing(bytes.NewReader(b))
	} else {
		ring, err = openpgp.ReadKeyRing(bytes.NewReader(b))
	}
	if err != nil {
		return nil, fmt.Errorf("keyring: not an OpenPGP keyring: %v", err)
	}
	if len(ring) == 0 {
		return nil, errors.New("keyring: holds no key")
	}
	return ring, nil
}

// fetchProvenance reads c's provenance file and the archive name it must
// sign: from a Helm repository, "<chart URL>.prov" (as `helm pull
// --verify`); from an OCI registry, the provenance layer of its manifest.
func fetchProvenance(ctx context.Context, c *Chart, opts Options) ([]byte, string, error) {
	what := fmt.Sprintf("chart %s %s from %s", c.Name, c.Version, c.Repo)
	if IsOCI(c.Repo) {
		return ociProvenance(ctx, c, opts, what)
	}
	u := c.URL
	if u == "" {
		again, err := resolveHTTP(ctx, Ref{Repo: c.Repo, Name: c.Name, Version: c.Version}, opts)
		if err != nil {
			return nil, "", err
		}
		u = again.URL
	}
	pu, err := url.Parse(u)
	if err != nil {
		return nil, "", fmt.Errorf("%s: URL: %v", what, redactErr(err))
	}
	file := path.Base(pu.Path)
	if file == "" || file == "." || file == "/" {
		return nil, "", fmt.Errorf("%s: the chart URL names no file", what)
	}
	prov, err := get(ctx, u+".prov", opts, maxSignatureSize, what+" provenance file", sameHost(u, c.Repo))
	if errors.Is(err, ErrNotFound) {
		return nil, "", fmt.Errorf("%s: %w: the repository serves no provenance file (%s.prov)", what, ErrSignature, file)
	}
	if err != nil {
		return nil, "", err
	}
	return prov, file, nil
}

// ociProvenance fetches the provenance layer Helm pushes with a signed
// chart (`helm push` of a chart with its .prov beside it).
func ociProvenance(ctx context.Context, c *Chart, opts Options, what string) ([]byte, string, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(c.OCIManifest, &m); err != nil {
		return nil, "", fmt.Errorf("%s: OCI manifest: %v", what, err)
	}
	var found []ocispec.Descriptor
	for _, l := range m.Layers {
		if l.MediaType == registry.ProvLayerMediaType {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		return nil, "", fmt.Errorf("%s: %w: its OCI manifest has %d provenance layers, not one", what, ErrSignature, len(found))
	}
	r, err := ociRepository(c.Repo, c.Name, opts)
	if err != nil {
		return nil, "", err
	}
	prov, err := fetchBlob(ctx, r.Blobs(), found[0], what+" provenance layer", opts)
	if err != nil {
		return nil, "", err
	}
	return prov, c.Name + "-" + c.Version + ".tgz", nil
}

// checkProvenance verifies prov with Helm's own provenance check: a
// clear-signature by a key of ring over a block naming file with the
// sha256 of tgz. Helm's check reads files, so both go to a private
// temporary folder for the call.
func checkProvenance(tgz, prov []byte, file string, ring openpgp.EntityList, what string) error {
	dir, err := os.MkdirTemp("", "sluice-prov-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	chartPath, provPath := filepath.Join(dir, file), filepath.Join(dir, "chart.prov")
	if err := os.WriteFile(chartPath, tgz, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(provPath, prov, 0o600); err != nil {
		return err
	}
	s := &provenance.Signatory{KeyRing: ring}
	if _, err := s.Verify(chartPath, provPath); err != nil {
		return fmt.Errorf("%s: %w: provenance: %v", what, ErrSignature, strings.ReplaceAll(err.Error(), dir+"/", ""))
	}
	return nil
}

// cosignVerifiers loads the PEM public keys.
func cosignVerifiers(keys [][]byte) ([]signature.Verifier, error) {
	if len(keys) == 0 {
		return nil, errors.New("cosign: no public key")
	}
	out := make([]signature.Verifier, 0, len(keys))
	for i, k := range keys {
		pub, err := cryptoutils.UnmarshalPEMToPublicKey(k)
		if err != nil {
			return nil, fmt.Errorf("cosign: public key %d: %v", i+1, err)
		}
		v, err := signature.LoadVerifier(pub, crypto.SHA256)
		if err != nil {
			return nil, fmt.Errorf("cosign: public key %d: %v", i+1, err)
		}
		out = append(out, v)
	}
	return out, nil
}

// checkCosign reads the signature manifest of c's digest and accepts c
// when one of its simple-signing layers is signed by one of verifiers and
// names exactly c's manifest digest.
func checkCosign(ctx context.Context, c *Chart, verifiers []signature.Verifier, opts Options, what string) error {
	hexd, err := hexDigest(c.Digest)
	if err != nil {
		return err
	}
	r, err := ociRepository(c.Repo, c.Name, opts)
	if err != nil {
		return err
	}
	tag := "sha256-" + hexd + ".sig"
	_, rc, err := r.FetchReference(ctx, tag)
	if err != nil {
		err = ociErr(what+" cosign signature", err, opts)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("%s: %w: no cosign signature (%s)", what, ErrSignature, tag)
		}
		return err
	}
	man, err := readLimited(rc, maxManifestSize, what+" cosign signature manifest")
	rc.Close()
	if err != nil {
		return ociErr(what, err, opts)
	}
	var m ocispec.Manifest
	if err := json.Unmarshal(man, &m); err != nil {
		return fmt.Errorf("%s: %w: the cosign signature manifest: %v", what, ErrSignature, err)
	}
	var problems []string
	for i, l := range m.Layers {
		if i >= maxSignatureLayers {
			problems = append(problems, fmt.Sprintf("more than %d signatures, the rest not looked at", maxSignatureLayers))
			break
		}
		if l.MediaType != cosignSimpleSigningMediaType {
			continue
		}
		sig, err := base64.StdEncoding.DecodeString(l.Annotations[cosignSignatureAnnotation])
		if err != nil || len(sig) == 0 {
			problems = append(problems, fmt.Sprintf("signature %d has no base64 signature", i+1))
			continue
		}
		body, err := fetchBlob(ctx, r.Blobs(), l, what+" cosign payload", opts)
		if err != nil {
			return err
		}
		if p := checkPayload(body, sig, verifiers, c.Digest); p != "" {
			problems = append(problems, fmt.Sprintf("signature %d: %s", i+1, p))
			continue
		}
		return nil
	}
	if len(problems) == 0 {
		problems = append(problems, "the signature manifest holds no cosign signature")
	}
	return fmt.Errorf("%s: %w: %s", what, ErrSignature, strings.Join(problems, "; "))
}

// checkPayload says what is wrong with one cosign signature ("" when it
// is good): sig over body by one of verifiers, body a simple-signing
// payload of the digest want.
func checkPayload(body, sig []byte, verifiers []signature.Verifier, want string) string {
	signed := false
	for _, v := range verifiers {
		if v.VerifySignature(bytes.NewReader(sig), bytes.NewReader(body)) == nil {
			signed = true
			break
		}
	}
	if !signed {
		return "not made by any of the public keys"
	}
	var p payload.SimpleContainerImage
	if err := json.Unmarshal(body, &p); err != nil {
		return "the payload is not a cosign simple-signing payload"
	}
	if p.Critical.Type != payload.CosignSignatureType {
		return fmt.Sprintf("the payload's type is %q", p.Critical.Type)
	}
	if p.Critical.Image.DockerManifestDigest != want {
		return fmt.Sprintf("it signs %s, not %s", p.Critical.Image.DockerManifestDigest, want)
	}
	return ""
}

// fetchBlob reads the blob d names, bounded by maxSignatureSize and
// checked against its digest.
func fetchBlob(ctx context.Context, blobs content.Fetcher, d ocispec.Descriptor, what string, opts Options) ([]byte, error) {
	if d.Size > maxSignatureSize {
		return nil, fmt.Errorf("%s: %w of %d bytes (it has %d)", what, ErrTooLarge, maxSignatureSize, d.Size)
	}
	if d.Digest.Algorithm() != digest.SHA256 || d.Digest.Validate() != nil {
		return nil, fmt.Errorf("%s: digest %q is not a sha256", what, d.Digest)
	}
	rc, err := blobs.Fetch(ctx, d)
	if err != nil {
		return nil, ociErr(what, err, opts)
	}
	defer rc.Close()
	b, err := readLimited(rc, maxSignatureSize, what)
	if err != nil {
		return nil, ociErr(what, err, opts)
	}
	if got := Digest(b); got != d.Digest.String() {
		return nil, fmt.Errorf("%s: %w: it is %s, the manifest names %s", what, ErrDigestMismatch, got, d.Digest)
	}
	return b, nil
}
