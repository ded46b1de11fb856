package main

import (
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPush_toRegistry pushes the layout to go-containerregistry's registry
// (on loopback) and reads the image and its signature back from there,
// as cosign would after a release is pushed.
func TestPush_toRegistry(t *testing.T) {
	out, built := releaseFixture(t)
	srv := httptest.NewServer(registry.New())
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	prefix := host + "/acme"

	pushed, err := PushLayout(filepath.Join(out, "oci"), prefix, []name.Option{name.Insecure})
	if err != nil {
		t.Fatal(err)
	}
	// index, 2 platform SBOMs, 5 signatures
	if len(pushed) != 8 {
		t.Fatalf("pushed %d references:\n%s", len(pushed), strings.Join(pushed, "\n"))
	}
	ref, err := name.NewTag(prefix+"/hello:1.2.3", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := remote.Index(ref)
	if err != nil {
		t.Fatal(err)
	}
	d, err := idx.Digest()
	if err != nil || d != built[0].Digest {
		t.Fatalf("registry holds %s, the layout %s (%v)", d, built[0].Digest, err)
	}
	sig, err := remote.Image(SignatureTag(ref.Context(), d))
	if err != nil {
		t.Fatal(err)
	}
	v, err := LoadVerifier(filepath.Join(out, "cosign.pub"))
	if err != nil {
		t.Fatal(err)
	}
	// The payload names the repository the image was signed in; cosign
	// checks the digest, which moved unchanged.
	if err := VerifySignatureImage(v, sig, built[0].Ref.Context(), d); err != nil {
		t.Fatal(err)
	}
	if _, err := PushTarget(prefix, "not a ref"); err == nil {
		t.Error("PushTarget accepted a bad reference")
	}
}
