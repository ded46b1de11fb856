// Package validation is the syncer's seam to the validator library: the
// controller asks a Validator for the verdict and digests of one release at
// one revision, from the release's extracted artifact.
package validation

import (
	"context"

	tfjson "github.com/hashicorp/terraform-json"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Request is one release to validate.
type Request struct {
	// RepoRoot is a folder holding the release's inputs at their
	// repository-relative paths (the extracted artifact).
	RepoRoot string
	// Service is the parsed manifest (Dir set).
	Service *manifest.Service
	// Environment is the environment's name.
	Environment string
	// ControlNamespace is where the Repository, its Releases and the
	// Terraform state live.
	ControlNamespace string
	// Release names the Release; the Terraform state's secret_suffix.
	Release string
	// Previous is the release at its last applied revision, which the
	// Helm risk is rated against; nil when nothing was applied (every
	// object new).
	Previous *Previous
	// Confine is where the release's objects may go besides its target
	// namespace (ConfinementOf the Repository); the zero value allows
	// nothing else.
	Confine helmcheck.Confinement
}

// ConfinementOf is the Repository's allowedExtraNamespaces and
// allowedClusterKinds as the validator takes them.
func ConfinementOf(repo *sluicev1.Repository) helmcheck.Confinement {
	var c helmcheck.Confinement
	if repo == nil {
		return c
	}
	c.ExtraNamespaces = append(c.ExtraNamespaces, repo.Spec.AllowedExtraNamespaces...)
	for _, gk := range repo.Spec.AllowedClusterKinds {
		c.ClusterKinds = append(c.ClusterKinds, schema.GroupKind{Group: gk.Group, Kind: gk.Kind})
	}
	return c
}

// Previous is a release at its last applied revision.
type Previous struct {
	// Revision is the previous commit.
	Revision string
	// Manifest is what it rendered (manifests and hooks, Result.Manifest)
	// when already known (remembered from validating that revision);
	// otherwise RepoRoot and Service are rendered with the same release
	// name and Kubernetes version.
	Manifest string
	// RepoRoot holds the previous revision's service and chart folders at
	// their repository-relative paths; Service is its parsed manifest.
	RepoRoot string
	Service  *manifest.Service
	// Err says why the previous revision could not be read. The change
	// is then rated as for an unreadable previous manifest (high, with a
	// finding saying why); it never blocks the validation.
	Err error
}

// Result is the validator's answer.
type Result struct {
	Verdict        sluicev1.Verdict
	ManifestDigest sluicev1.Digest
	PlanDigest     sluicev1.Digest
	PlanFileSHA256 sluicev1.Digest
	// PolicyBundleDigest is the digest of the policy bundle the verdict
	// came from (policy.BundleDigest); "" when the validator has none.
	PolicyBundleDigest sluicev1.Digest
	// PlanFile is the saved Terraform plan, stored in the plan Secret(s).
	PlanFile    []byte
	PlanSummary *sluicev1.PlanSummary
	// Manifest is everything the chart rendered, hooks included
	// (helmcheck.Result.Rendered; "" when the chart did not render),
	// remembered to rate the next change against.
	Manifest string
	// For the review shown to approvers (review.Input): the plan as the
	// validator decoded it, what the release rendered at its last applied
	// revision ("" when nothing was applied), and why the risk is what
	// it is.
	Plan             *tfjson.Plan
	PreviousManifest string
	RiskReasons      []string
	// PlanSecrets are the secret strings the policy engine found in the
	// plan (validate.PlanCheck.Secrets), so the review redacts them without
	// walking the plan again.
	PlanSecrets []string
	// PlanErrorDetails is the full text of a failed plan whose findings
	// say "plan failed (details for approvers)"
	// (terraform.RunError.DetailsText): stored only where approvers read
	// it (changespec.StorePlanError), never in a finding, log or event.
	PlanErrorDetails string
}

// Validator validates one release. An error means the validation could not
// run (a missing binary, an unreachable state backend); problems of the
// change itself are findings in the verdict.
type Validator interface {
	Validate(ctx context.Context, req Request) (*Result, error)
}
