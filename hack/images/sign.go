package main

import (
	"bytes"
	"crypto"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
)

// What cosign writes and reads (cosign's pkg/oci/static and
// pkg/types): a signature is an OCI image tagged sha256-<hex>.sig in the
// signed image's repository, one layer per signature holding the
// simple-signing payload, the base64 signature in a layer annotation.
const (
	SimpleSigningMediaType types.MediaType = "application/vnd.dev.cosign.simplesigning.v1+json"
	SignatureAnnotation                    = "dev.cosignproject.cosign/signature"
	SPDXJSONMediaType      types.MediaType = "text/spdx+json"
)

// KeyError reports a signing or verification key that cannot be used.
type KeyError struct {
	Path string
	Err  error
}

func (e *KeyError) Error() string { return fmt.Sprintf("key %s: %v", e.Path, e.Err) }

func (e *KeyError) Unwrap() error { return e.Err }

// SignatureError reports an image whose signature is missing or wrong.
type SignatureError struct {
	Ref    string
	Digest v1.Hash
	Reason string
}

func (e *SignatureError) Error() string {
	return fmt.Sprintf("signature of %s@%s: %s", e.Ref, e.Digest, e.Reason)
}

// EnsureKeyPair creates an ECDSA P-256 key pair (cosign's kind) at keyPath
// and pubPath when keyPath does not exist; the private key is PKCS#8 PEM,
// unencrypted, mode 0600: a local build key, never a release key.
func EnsureKeyPair(keyPath, pubPath string) (created bool, err error) {
	if _, err := os.Stat(keyPath); err == nil {
		return false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return false, &KeyError{Path: keyPath, Err: err}
	}
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), nil)
	if err != nil {
		return false, &KeyError{Path: keyPath, Err: err}
	}
	if err := os.MkdirAll(filepath.Dir(keyPath), 0o755); err != nil {
		return false, &KeyError{Path: keyPath, Err: err}
	}
	if err := os.WriteFile(keyPath, priv, 0o600); err != nil {
		return false, &KeyError{Path: keyPath, Err: err}
	}
	if err := os.WriteFile(pubPath, pub, 0o644); err != nil {
		return false, &KeyError{Path: pubPath, Err: err}
	}
	return true, nil
}

// LoadSigner reads a PEM private key: PKCS#8, SEC 1 EC, PKCS#1 RSA, or a
// cosign-encrypted key (password from COSIGN_PASSWORD, as cosign does).
func LoadSigner(keyPath string) (signature.SignerVerifier, error) {
	pemBytes, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, &KeyError{Path: keyPath, Err: err}
	}
	pass := func(bool) ([]byte, error) {
		if p, ok := os.LookupEnv("COSIGN_PASSWORD"); ok {
			return []byte(p), nil
		}
		return nil, nil
	}
	priv, err := cryptoutils.UnmarshalPEMToPrivateKey(pemBytes, pass)
	if err != nil {
		return nil, &KeyError{Path: keyPath, Err: err}
	}
	sv, err := signature.LoadSignerVerifier(priv, crypto.SHA256)
	if err != nil {
		return nil, &KeyError{Path: keyPath, Err: err}
	}
	return sv, nil
}

// LoadVerifier reads a PEM public key.
func LoadVerifier(pubPath string) (signature.Verifier, error) {
	pemBytes, err := os.ReadFile(pubPath)
	if err != nil {
		return nil, &KeyError{Path: pubPath, Err: err}
	}
	pub, err := cryptoutils.UnmarshalPEMToPublicKey(pemBytes)
	if err != nil {
		return nil, &KeyError{Path: pubPath, Err: err}
	}
	v, err := signature.LoadVerifier(pub, crypto.SHA256)
	if err != nil {
		return nil, &KeyError{Path: pubPath, Err: err}
	}
	return v, nil
}

// WritePublicKey writes the public half of signer as PEM.
func WritePublicKey(signer signature.SignerVerifier, pubPath string) error {
	pub, err := signer.PublicKey()
	if err != nil {
		return err
	}
	pemBytes, err := cryptoutils.MarshalPublicKeyToPEM(pub)
	if err != nil {
		return err
	}
	return os.WriteFile(pubPath, pemBytes, 0o644)
}

// SignatureTag is the tag cosign looks up for the signature of digest.
func SignatureTag(repo name.Repository, digest v1.Hash) name.Tag {
	return repo.Tag(fmt.Sprintf("%s-%s.sig", digest.Algorithm, digest.Hex))
}

// layoutRef names a tag in the layout the way people write it: Docker
// Hub's registry left out (sluice-gitops/operator:0.1.0), whatever way
// the tag was made.
func layoutRef(t name.Tag) string {
	if t.RegistryStr() == name.DefaultRegistry {
		return t.RepositoryStr() + ":" + t.TagStr()
	}
	return t.Name()
}

// SBOMTag is the tag `cosign attach sbom` uses for the SBOM of digest.
func SBOMTag(repo name.Repository, digest v1.Hash) name.Tag {
	return repo.Tag(fmt.Sprintf("%s-%s.sbom", digest.Algorithm, digest.Hex))
}

// SignatureImage signs the simple-signing payload for repo@digest and
// wraps it the way cosign stores it.
func SignatureImage(signer signature.Signer, repo name.Repository, digest v1.Hash) (v1.Image, error) {
	pl, err := json.Marshal(payload.Cosign{Image: repo.Digest(digest.String())})
	if err != nil {
		return nil, err
	}
	sig, err := signer.SignMessage(bytes.NewReader(pl))
	if err != nil {
		return nil, fmt.Errorf("sign %s@%s: %w", repo, digest, err)
	}
	layer := static.NewLayer(pl, SimpleSigningMediaType)
	return artifactImage(layer, map[string]string{SignatureAnnotation: base64.StdEncoding.EncodeToString(sig)})
}

// SBOMImage wraps an SPDX JSON document as cosign's attached SBOMs are.
func SBOMImage(sbom []byte) (v1.Image, error) {
	return artifactImage(static.NewLayer(sbom, SPDXJSONMediaType), nil)
}

// artifactImage is an OCI image with one non-filesystem layer, like
// cosign's signature and attachment images.
func artifactImage(layer v1.Layer, annotations map[string]string) (v1.Image, error) {
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	return mutate.Append(base, mutate.Addendum{Layer: layer, Annotations: annotations})
}

// VerifySignatureImage checks that sigImg holds at least one signature by
// verifier over a payload naming repo's digest, as `cosign verify --key`
// does (without a transparency log).
func VerifySignatureImage(verifier signature.Verifier, sigImg v1.Image, repo name.Repository, digest v1.Hash) error {
	m, err := sigImg.Manifest()
	if err != nil {
		return &SignatureError{Ref: repo.String(), Digest: digest, Reason: err.Error()}
	}
	reason := "no signature layer"
	for _, desc := range m.Layers {
		if desc.MediaType != SimpleSigningMediaType {
			continue
		}
		if r := checkSignatureLayer(verifier, sigImg, desc, repo, digest); r != "" {
			reason = r
			continue
		}
		return nil
	}
	return &SignatureError{Ref: repo.String(), Digest: digest, Reason: reason}
}

// checkSignatureLayer verifies one signature layer; it returns why not, or
// "" when it holds.
func checkSignatureLayer(verifier signature.Verifier, img v1.Image, desc v1.Descriptor, repo name.Repository, digest v1.Hash) string {
	sig, err := base64.StdEncoding.DecodeString(desc.Annotations[SignatureAnnotation])
	if err != nil || len(sig) == 0 {
		return "signature annotation missing or not base64"
	}
	layer, err := img.LayerByDigest(desc.Digest)
	if err != nil {
		return err.Error()
	}
	rc, err := layer.Compressed()
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	pl, err := io.ReadAll(rc)
	if err != nil {
		return err.Error()
	}
	if err := verifier.VerifySignature(bytes.NewReader(sig), bytes.NewReader(pl)); err != nil {
		return "signature does not verify with the public key: " + err.Error()
	}
	var claims payload.Cosign
	if err := json.Unmarshal(pl, &claims); err != nil {
		return "payload: " + err.Error()
	}
	if claims.Image.DigestStr() != digest.String() {
		return fmt.Sprintf("payload signs %s, not this digest", claims.Image.DigestStr())
	}
	if claims.Image.Context().Name() != repo.Name() {
		return fmt.Sprintf("payload signs repository %s, not %s", claims.Image.Context().Name(), repo.Name())
	}
	return ""
}
