// Package validation is the syncer's seam to the validator library: the
// controller asks a Validator for the verdict and digests of one release at
// one revision, from the release's extracted artifact.
package validation

import (
	"context"

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
}

// Result is the validator's answer.
type Result struct {
	Verdict        sluicev1.Verdict
	ManifestDigest sluicev1.Digest
	PlanDigest     sluicev1.Digest
	PlanFileSHA256 sluicev1.Digest
	// PlanFile is the saved Terraform plan, stored in the plan Secret(s).
	PlanFile    []byte
	PlanSummary *sluicev1.PlanSummary
}

// Validator validates one release. An error means the validation could not
// run (a missing binary, an unreachable state backend); problems of the
// change itself are findings in the verdict.
type Validator interface {
	Validate(ctx context.Context, req Request) (*Result, error)
}
