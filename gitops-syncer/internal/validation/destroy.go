package validation

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// DeleteRequest is a release to remove, described at its last applied
// revision (never at the commit that removed it).
type DeleteRequest struct {
	// RepoRoot holds the release's inputs at the applied revision at their
	// repository-relative paths (the extracted artifact).
	RepoRoot string
	// Service is the manifest at the applied revision (Dir set).
	Service *manifest.Service
	// Environment is the environment's name.
	Environment string
	// ControlNamespace and Release locate the Terraform state, as for a
	// normal plan.
	ControlNamespace string
	Release          string
}

// DeleteResult is what removing the release would do.
type DeleteResult struct {
	// Result carries the destroy plan (file, digests, summary) and its
	// verdict; its ManifestDigest is the digest of the applied manifest.
	Result
	// Objects are the objects of the applied manifest (hooks and crds/
	// left out: Helm does not remove them on uninstall).
	Objects []sluicev1.ObjectReference
}

// DeletePlanner describes the removal of a release: what its Helm release
// holds and a destroy plan of its Terraform stack.
type DeletePlanner interface {
	PlanDelete(ctx context.Context, req DeleteRequest) (*DeleteResult, error)
}

var _ DeletePlanner = (*Library)(nil)

// PlanDelete implements DeletePlanner: it renders the applied revision's
// chart (the objects an uninstall removes) and, when the service has a
// Terraform stack, makes `terraform plan -destroy` of the applied
// configuration against the release's state, through the same
// terraform.Plan path as Validate's plans. A chart that no longer renders
// leaves the object list empty with a warning; a stack terraform refuses
// is a failing verdict; a back-end failure is an error (retried).
func (l *Library) PlanDelete(ctx context.Context, req DeleteRequest) (*DeleteResult, error) {
	out := &DeleteResult{Result: Result{Verdict: sluicev1.Verdict{Result: sluicev1.VerdictPass, Risk: sluicev1.RiskHigh}}}
	render, err := l.V.RenderService(ctx, validate.ServiceRequest{RepoRoot: req.RepoRoot, ServiceDir: req.Service.Dir, Environment: req.Environment, HelmReleaseName: req.Release})
	switch {
	case err == nil:
		out.ManifestDigest = sluicev1.Digest(render.ManifestDigest)
		out.Manifest = render.Manifest
		for _, o := range render.Objects {
			if o.Hook || o.CRDFolder {
				continue
			}
			out.Objects = append(out.Objects, sluicev1.ObjectReference{APIVersion: o.APIVersion, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name})
		}
	case errors.Is(err, validate.ErrNotRendered), errors.Is(err, validate.ErrChartRepository):
		out.Verdict.Findings = append(out.Verdict.Findings, sluicev1.Finding{Severity: sluicev1.SeverityWarn, Source: "helm", Policy: "helm.delete",
			Message: fmt.Sprintf("the applied revision's chart could not be rendered (%s): the objects the uninstall removes are not listed", err)})
		out.Verdict.Result = sluicev1.VerdictWarn
	default:
		return nil, err
	}
	tfDir := req.Service.TerraformDir()
	if tfDir == "" {
		return out, nil
	}
	env, ok := req.Service.Environment(req.Environment)
	if !ok {
		return nil, fmt.Errorf("environment %q not in the manifest", req.Environment)
	}
	if l.state == nil {
		return nil, errors.New("a destroy plan needs the Terraform state server, and none is configured")
	}
	pr := validate.PlanRequest{
		Root:    req.RepoRoot,
		Dir:     filepath.Join(req.RepoRoot, filepath.FromSlash(tfDir)),
		Backend: terraform.BackendHTTP,
		Destroy: true,
	}
	if env.Terraform != nil {
		pr.Vars, pr.Workspace = env.Terraform.Vars, env.Terraform.Workspace
	}
	// Like Validate's plans: through the runner, with a credential that
	// may read and lock this release's state only.
	cred, err := l.state.Grant(tfstate.Grant{Namespace: req.ControlNamespace, Release: req.Release, Workspace: pr.Workspace, Mode: tfstate.ModePlan, TTL: terraform.DefaultTimeout + 5*time.Minute})
	if err != nil {
		return nil, fmt.Errorf("destroy plan: no state credential: %w", err)
	}
	pr.Env = cred.Env()
	plan, err := l.V.PlanAndCheck(ctx, pr)
	l.endLostRun(ctx, cred, err)
	var tfErr *terraform.RunError
	switch {
	case errors.As(err, &tfErr) && tfErr.Kind == terraform.ErrorConfiguration:
		out.Verdict = sluicev1.Verdict{Result: sluicev1.VerdictFail, Risk: sluicev1.RiskHigh, Findings: append(out.Verdict.Findings, terraformProblems(tfErr, tfDir)...)}
		if tfErr.HasWithheld() {
			out.PlanErrorDetails = tfErr.DetailsText()
		}
		return out, nil
	case err != nil:
		return nil, err
	}
	v := convertVerdict(plan.Verdict)
	out.Verdict.Findings = append(out.Verdict.Findings, v.Findings...)
	if v.Result == sluicev1.VerdictFail || (v.Result == sluicev1.VerdictWarn && out.Verdict.Result == sluicev1.VerdictPass) {
		out.Verdict.Result = v.Result
	}
	out.PlanDigest = sluicev1.Digest(plan.Report.PlanDigest)
	out.PlanFileSHA256 = sluicev1.Digest(plan.Report.PlanFileSHA256)
	out.PlanFile = plan.PlanFile
	out.PlanSummary = &sluicev1.PlanSummary{Add: int32(plan.Summary.Add), Change: int32(plan.Summary.Change), Destroy: int32(plan.Summary.Destroy)}
	return out, nil
}
