// Package chartrepotest signs charts for tests the way their publishers
// do: Helm's provenance file with an OpenPGP key (`helm package --sign`)
// and a cosign signature of a chart's OCI manifest (`cosign sign --key`),
// with keys made in the test.
package chartrepotest

import (
	"bytes"
	"context"
	"crypto"
	"crypto/elliptic"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ProtonMail/go-crypto/openpgp"
	"github.com/ProtonMail/go-crypto/openpgp/armor"
	"github.com/ProtonMail/go-crypto/openpgp/packet"
	"github.com/google/go-containerregistry/pkg/name"
	godigest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sigstore/sigstore/pkg/cryptoutils"
	"github.com/sigstore/sigstore/pkg/signature"
	"github.com/sigstore/sigstore/pkg/signature/payload"
	"helm.sh/helm/v3/pkg/provenance"
	"oras.land/oras-go/v2/registry/remote"
	"oras.land/oras-go/v2/registry/remote/auth"
)

// PGPKey is an OpenPGP signing key and its public keyring.
type PGPKey struct {
	Entity *openpgp.Entity
	// Keyring is the public key as a binary keyring (`gpg --export`).
	Keyring []byte
	// Armored is the same keyring ASCII-armored (`gpg --export --armor`).
	Armored []byte
}

// NewPGPKey makes an Ed25519 OpenPGP key.
func NewPGPKey(t testing.TB, who string) *PGPKey {
	t.Helper()
	e, err := openpgp.NewEntity(who, "test", who+"@example.com", &packet.Config{Algorithm: packet.PubKeyAlgoEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	var ring bytes.Buffer
	if err := e.Serialize(&ring); err != nil {
		t.Fatal(err)
	}
	var arm bytes.Buffer
	w, err := armor.Encode(&arm, openpgp.PublicKeyType, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(ring.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return &PGPKey{Entity: e, Keyring: ring.Bytes(), Armored: arm.Bytes()}
}

// Provenance is the .prov `helm package --sign` writes for the archive tgz
// saved as file: a clear-signature by k over the chart's metadata and the
// archive's sha256.
func (k *PGPKey) Provenance(t testing.TB, file string, tgz []byte) []byte {
	t.Helper()
	p := filepath.Join(t.TempDir(), file)
	if err := os.WriteFile(p, tgz, 0o644); err != nil {
		t.Fatal(err)
	}
	s := &provenance.Signatory{Entity: k.Entity}
	prov, err := s.ClearSign(p)
	if err != nil {
		t.Fatal(err)
	}
	return []byte(prov)
}

// CosignKey is a cosign key pair (ECDSA P-256, cosign's kind).
type CosignKey struct {
	Signer signature.SignerVerifier
	// PublicPEM is the public key as `cosign generate-key-pair` writes
	// cosign.pub.
	PublicPEM []byte
}

// NewCosignKey makes a cosign key pair.
func NewCosignKey(t testing.TB) *CosignKey {
	t.Helper()
	priv, pub, err := cryptoutils.GeneratePEMEncodedECDSAKeyPair(elliptic.P256(), nil)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := cryptoutils.UnmarshalPEMToPrivateKey(priv, cryptoutils.SkipPassword)
	if err != nil {
		t.Fatal(err)
	}
	s, err := signature.LoadSignerVerifier(pk, crypto.SHA256)
	if err != nil {
		t.Fatal(err)
	}
	return &CosignKey{Signer: s, PublicPEM: pub}
}

// Sign stores, as `cosign sign --key` does, a signature by k of the
// manifest digest signed (what the payload names) under the tag of
// digest tagged ("sha256-<hex>.sig") in the repository ref
// ("<host>/<path>/<chart>") of a registry reached with client. Signing
// one digest and tagging it under another is how a test copies a
// signature to another chart.
func (k *CosignKey) Sign(t testing.TB, client *http.Client, ref, signed, tagged string) {
	t.Helper()
	d, err := name.NewDigest(ref + "@" + signed)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := json.Marshal(payload.Cosign{Image: d})
	if err != nil {
		t.Fatal(err)
	}
	sig, err := k.Signer.SignMessage(bytes.NewReader(pl))
	if err != nil {
		t.Fatal(err)
	}
	PushSignatureManifest(t, client, ref, tagged, pl, base64.StdEncoding.EncodeToString(sig))
}

// PushSignatureManifest pushes a cosign signature manifest for digest
// tagged: one simple-signing layer holding pl, with sig as its signature
// annotation.
func PushSignatureManifest(t testing.TB, client *http.Client, ref, tagged string, pl []byte, sig string) {
	t.Helper()
	ctx := context.Background()
	r, err := remote.NewRepository(ref)
	if err != nil {
		t.Fatal(err)
	}
	r.Client = &auth.Client{Client: client}
	push := func(mediaType string, b []byte) ocispec.Descriptor {
		desc := ocispec.Descriptor{MediaType: mediaType, Digest: godigest.FromBytes(b), Size: int64(len(b))}
		if err := r.Blobs().Push(ctx, desc, bytes.NewReader(b)); err != nil {
			t.Fatal(err)
		}
		return desc
	}
	config := push(ocispec.MediaTypeImageConfig, []byte(`{"architecture":"","os":"","config":{},"rootfs":{"type":"layers","diff_ids":[]}}`))
	layer := push("application/vnd.dev.cosign.simplesigning.v1+json", pl)
	layer.Annotations = map[string]string{"dev.cosignproject.cosign/signature": sig}
	man, err := json.Marshal(ocispec.Manifest{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageManifest,
		Config: config, Layers: []ocispec.Descriptor{layer}})
	if err != nil {
		t.Fatal(err)
	}
	desc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageManifest, Digest: godigest.FromBytes(man), Size: int64(len(man))}
	tag := "sha256-" + strings.TrimPrefix(tagged, "sha256:") + ".sig"
	if err := r.PushReference(ctx, desc, bytes.NewReader(man), tag); err != nil {
		t.Fatal(err)
	}
}
