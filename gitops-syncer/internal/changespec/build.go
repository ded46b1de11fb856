package changespec

import (
	"fmt"
	"io/fs"
	"path"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Change is everything one ChangeRequest is built from. The branch sync
// (internal/controller) and pull-request previews (internal/preview) fill
// it and call Build, so every rule about what a change records is written
// once.
type Change struct {
	// Repository owns the change (its namespace is the ChangeRequest's).
	Repository *sluicev1.Repository
	// Release, Service and Environment name the release.
	Release     string
	Service     string
	Environment string
	// ServiceDir is the service folder, for locating manifest findings.
	ServiceDir string
	// Source is what the change acts on (SourceOf); nil only for a change
	// whose manifest does not parse, which is rejected anyway.
	Source *sluicev1.ChangeSource
	// Operation is Apply ("") or Delete; a Delete records Deletion, is
	// never less than high risk and has its own approval digest.
	Operation sluicev1.Operation
	Deletion  *sluicev1.DeletionSpec
	// Name is the ChangeRequest's name.
	Name     string
	Revision string
	Attempt  int32
	// PreviousRevision is the revision the change was computed against
	// ("" for none).
	PreviousRevision string
	Authors          []sluicev1.Identity
	// PullRequestAuthor and Pushers are the pull request's people (see
	// ChangeRequestSpec).
	PullRequestAuthor sluicev1.Identity
	Pushers           []sluicev1.Identity

	// MergedPullRequests are the previewed pull requests a change of the
	// tracked branch merges; approvals of their previews count for it.
	MergedPullRequests []int64

	CommitMessage string
	// PullRequest marks a preview (or a change tied to a pull request).
	PullRequest     *sluicev1.PullRequestRef
	TargetNamespace string
	// Delivery is the manifest's delivery; "" means helm.
	Delivery    sluicev1.Delivery
	Rule        sluicev1.ApprovalRule
	Artifact    *artifact.Artifact
	ArtifactURL string
	// Result is the validator's result; nil when the change could not be
	// validated (then Findings hold the reason and the verdict fails).
	Result *validation.Result
	// Findings are the syncer's own findings (a manifest that does not
	// parse, an artifact that cannot be built).
	Findings []sluicev1.Finding
	// InputsErr says why the stack's modules could not be listed: a deny
	// finding unless terraform already rejected the stack.
	InputsErr error
	// Replan is the re-plan request the change answers ("" for none).
	Replan string
	// Rollback marks a rollback the operator asked for (the failed
	// change and the verified one it returns to): recorded in the spec,
	// in the approval digest and as an info finding.
	Rollback *sluicev1.RollbackSpec
	// Verification is the environment's verification block in
	// service.yaml (VerificationBlockOf); Build resolves it over the
	// Repository's defaults and records it, in the approval digest.
	Verification map[string]any
	// Files is the repository at Revision: the verification's templates
	// are read from it (nil: a block naming templates is a deny finding).
	Files fs.FS
}

// Build assembles the immutable record of a change: the spec, the verdict
// made stricter by the syncer's findings (a target namespace outside the
// Repository's targetNamespaces, an unlistable stack), the approval digest
// and the labels.
func Build(c Change) *sluicev1.ChangeRequest {
	repo := c.Repository
	delivery := c.Delivery.OrDefault()
	spec := sluicev1.ChangeRequestSpec{
		Release:           c.Release,
		Operation:         c.Operation,
		Deletion:          c.Deletion,
		Source:            c.Source,
		Revision:          c.Revision,
		Attempt:           c.Attempt,
		PreviousRevision:  c.PreviousRevision,
		Authors:           c.Authors,
		PullRequestAuthor: c.PullRequestAuthor,
		Pushers:           c.Pushers,
		CommitMessage:     text.Truncate(c.CommitMessage, 4000),
		PullRequest:       c.PullRequest,
		TargetNamespace:   c.TargetNamespace,
		Delivery:          delivery,
		Artifact:          sluicev1.ArtifactReference{URL: c.ArtifactURL, SHA256: sluicev1.Digest(c.Artifact.SHA256)},
		ContentDigest:     sluicev1.Digest(c.Artifact.ContentDigest),
		Rule:              c.Rule,

		MergedPullRequests: c.MergedPullRequests,
	}
	var findings []sluicev1.Finding
	if res := c.Result; res != nil {
		spec.ManifestDigest, spec.PlanDigest, spec.PlanFileSHA256 = res.ManifestDigest, res.PlanDigest, res.PlanFileSHA256
		spec.PlanSummary = res.PlanSummary
		spec.PolicyBundleDigest = res.PolicyBundleDigest
		spec.Verdict = res.Verdict
		findings = append(findings, res.Verdict.Findings...)
	} else {
		spec.Verdict = sluicev1.Verdict{Result: sluicev1.VerdictFail, Risk: sluicev1.RiskHigh}
	}
	findings = append(findings, c.Findings...)
	manifestFile := path.Join(c.ServiceDir, manifest.FileName)
	if !TargetAllowed(repo, c.TargetNamespace) {
		findings = append(findings, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "targetNamespaces",
			Message: fmt.Sprintf("target namespace %q is not in the Repository's targetNamespaces", c.TargetNamespace), File: manifestFile})
	}
	if c.InputsErr != nil && !hasDeny(findings, "terraform") {
		findings = append(findings, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "terraform.modules",
			Message: c.InputsErr.Error(), File: manifestFile})
	}
	if rb := c.Rollback; rb != nil {
		spec.Rollback = rb.DeepCopy()
		findings = append(findings, sluicev1.Finding{Severity: sluicev1.SeverityInfo, Source: "rollback", Policy: "rollback",
			Message: fmt.Sprintf("rollback of %s to %s: %s failed its verification; this returns the release to the verified revision %s", rb.Of, rb.To, rb.Of, sluicev1.ShortSHA(c.Revision))})
	}
	if c.Operation != sluicev1.OperationDelete {
		v, err := resolveVerification(repo, c.Verification, c.Files, c.ServiceDir)
		if err != nil {
			findings = append(findings, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "verification",
				Message: err.Error(), File: manifestFile})
		}
		spec.Verification = v
	}
	spec.Verdict.Findings, spec.Verdict.FindingsTruncated = CleanFindings(findings, spec.Verdict.FindingsTruncated)
	spec.Verdict.Result = VerdictResult(spec.Verdict.Result, spec.Verdict.Findings)
	if spec.Verdict.Risk == "" || c.Operation == sluicev1.OperationDelete {
		// A removal is never less than high risk.
		spec.Verdict.Risk = sluicev1.RiskHigh
	}
	spec.ApprovalDigest = sluicev1.ComputeRollbackApprovalDigest(repo.Namespace, c.Release, c.Operation, spec.ContentDigest, spec.ManifestDigest, spec.PlanDigest,
		sluicev1.VerificationDigest(spec.Verification), spec.Rollback)
	cr := &sluicev1.ChangeRequest{
		ObjectMeta: metav1.ObjectMeta{
			Name:      c.Name,
			Namespace: repo.Namespace,
			Labels: map[string]string{
				sluicev1.LabelRepository:  repo.Name,
				sluicev1.LabelRelease:     c.Release,
				sluicev1.LabelService:     c.Service,
				sluicev1.LabelEnvironment: c.Environment,
			},
		},
		Spec: spec,
	}
	// The change is served by its Repository's shard.
	sluicev1.SetShard(cr, sluicev1.ShardOf(repo))
	if pr := c.PullRequest; pr != nil && pr.Preview {
		cr.Labels[sluicev1.LabelPreview] = "true"
		cr.Labels[sluicev1.LabelPullRequest] = strconv.FormatInt(pr.Number, 10)
	}
	if c.Replan != "" {
		cr.Annotations = map[string]string{sluicev1.AnnotationReplan: c.Replan}
	}
	return cr
}

// hasDeny reports whether a deny finding of source is among findings.
func hasDeny(findings []sluicev1.Finding, source string) bool {
	for _, f := range findings {
		if f.Severity == sluicev1.SeverityDeny && f.Source == source {
			return true
		}
	}
	return false
}

// MaxPushers is the most pushers a ChangeRequest records (the API's limit).
const MaxPushers = 64

// AddIdentity appends id to ids unless it is empty, already there, or the
// list is full.
func AddIdentity(ids []sluicev1.Identity, id sluicev1.Identity) []sluicev1.Identity {
	if id == "" || len(ids) >= MaxPushers {
		return ids
	}
	for _, x := range ids {
		if x == id {
			return ids
		}
	}
	return append(ids, id)
}
