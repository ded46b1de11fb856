package helm

import (
	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// digestGate returns the post-renderer every install and upgrade runs with:
// the validator's own (helmcheck.DigestPostRenderer), which hashes exactly
// the bytes Helm hands a post-renderer with helmcheck.ManifestDigest and
// refuses, with helmcheck.ErrManifestMismatch, anything but the approved
// manifestDigest. Helm calls it after rendering and before it stores a
// release record or touches any object, so a refusal installs nothing.
func digestGate(approved sluicev1.Digest) *helmcheck.DigestPostRenderer {
	return &helmcheck.DigestPostRenderer{Expected: string(approved)}
}
