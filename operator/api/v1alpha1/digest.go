package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
)

var digestPattern = regexp.MustCompile(`^sha256:[a-f0-9]{64}$`)

// ValidDigest reports whether d is "sha256:" followed by 64 lower-case hex.
func ValidDigest(d string) bool { return digestPattern.MatchString(d) }

// SHA256Digest returns the Digest of b.
func SHA256Digest(b []byte) Digest {
	sum := sha256.Sum256(b)
	return Digest("sha256:" + hex.EncodeToString(sum[:]))
}

// ComputeApprovalDigest is the one definition of approvalDigest for an Apply
// change: the sha256 of
//
//	release:<namespace>/<release>\ncontent:<contentDigest>\nmanifest:<manifestDigest>\nplan:<planDigest>\n
//
// with empty manifest or plan digests written as empty strings. Binding the
// release (with its control namespace) means an approval for one environment
// never counts for another with the same content. A Delete change adds the
// line "operation:delete\n" at the end (ComputeOperationApprovalDigest), so
// an approval of an upgrade never counts for a removal of the same content,
// while every Apply digest stays what it always was.
func ComputeApprovalDigest(namespace, release string, content, manifest, plan Digest) Digest {
	return ComputeOperationApprovalDigest(namespace, release, OperationApply, content, manifest, plan)
}

// ComputeOperationApprovalDigest is ComputeApprovalDigest for an operation:
// Apply (or "") as documented there, Delete with "operation:delete\n"
// appended to the preimage.
func ComputeOperationApprovalDigest(namespace, release string, op Operation, content, manifest, plan Digest) Digest {
	return ComputeChangeApprovalDigest(namespace, release, op, content, manifest, plan, "")
}

// ComputeChangeApprovalDigest is ComputeOperationApprovalDigest of a change
// that carries a verification spec: "verification:<VerificationDigest>\n"
// is appended last when verification is not empty, so weakening a check
// needs a new approval, while the digest of a change without one stays
// what it always was.
func ComputeChangeApprovalDigest(namespace, release string, op Operation, content, manifest, plan, verification Digest) Digest {
	return ComputeRollbackApprovalDigest(namespace, release, op, content, manifest, plan, verification, nil)
}

// ComputeRollbackApprovalDigest is ComputeChangeApprovalDigest of a change
// that says it is a rollback: "rollback:<of>\nrollback-to:<to>\n" is
// appended last when rollback is set, so a change cannot claim to be a
// rollback (which a rule may let through without approvals) unless the
// claim is part of what its digest binds; every other digest stays what it
// always was.
func ComputeRollbackApprovalDigest(namespace, release string, op Operation, content, manifest, plan, verification Digest, rollback *RollbackSpec) Digest {
	var b strings.Builder
	fmt.Fprintf(&b, "release:%s/%s\ncontent:%s\nmanifest:%s\nplan:%s\n", namespace, release, content, manifest, plan)
	if op == OperationDelete {
		b.WriteString("operation:delete\n")
	}
	if verification != "" {
		fmt.Fprintf(&b, "verification:%s\n", verification)
	}
	if rollback != nil {
		fmt.Fprintf(&b, "rollback:%s\nrollback-to:%s\n", rollback.Of, rollback.To)
	}
	return SHA256Digest([]byte(b.String()))
}

// ExpectedApprovalDigest recomputes the approvalDigest of a ChangeRequest
// from its own fields.
func (c *ChangeRequest) ExpectedApprovalDigest() Digest {
	return ComputeRollbackApprovalDigest(c.Namespace, c.Spec.Release, c.Spec.Operation, c.Spec.ContentDigest, c.Spec.ManifestDigest, c.Spec.PlanDigest, VerificationDigest(c.Spec.Verification), c.Spec.Rollback)
}
