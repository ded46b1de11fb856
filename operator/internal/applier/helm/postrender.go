package helm

import (
	"bytes"
	"fmt"
	"sync"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// manifestDigest is the digest the validator records as manifestDigest: the
// sha256 of exactly the bytes Helm hands a post-renderer.
func manifestDigest(rendered []byte) sluicev1.Digest {
	return sluicev1.SHA256Digest(rendered)
}

// ManifestMismatchError says what Helm was about to install is not what was
// approved.
type ManifestMismatchError struct {
	Want, Got sluicev1.Digest
}

func (e *ManifestMismatchError) Error() string {
	return fmt.Sprintf("the rendered manifests hash to %s, the change was approved for %s", e.Got, e.Want)
}

// digestGate is a Helm post-renderer that passes the manifests through
// unchanged when they hash to the approved digest and refuses them
// otherwise. Helm calls it after rendering and before it stores a release
// record or touches any object, so a refusal installs nothing.
type digestGate struct {
	want sluicev1.Digest

	mu   sync.Mutex
	seen []sluicev1.Digest
}

// Run implements postrender.PostRenderer.
func (g *digestGate) Run(rendered *bytes.Buffer) (*bytes.Buffer, error) {
	got := manifestDigest(rendered.Bytes())
	g.mu.Lock()
	g.seen = append(g.seen, got)
	g.mu.Unlock()
	if got != g.want {
		return nil, &ManifestMismatchError{Want: g.want, Got: got}
	}
	return rendered, nil
}

// checked reports how many renders the gate has seen.
func (g *digestGate) checked() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.seen)
}
