package validation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Library is the Validator backed by the infra-validator library: Helm
// render and checks, and a Terraform plan against the release's state in
// the control namespace (Terraform's kubernetes backend, secret_suffix =
// the release; DESIGN.md §5).
type Library struct {
	V *validate.Validator
}

// LibraryOptions configure NewLibrary.
type LibraryOptions struct {
	// TerraformPath is the terraform binary ("" looks it up in PATH).
	TerraformPath string
	// TerraformEnv reaches the terraform child, e.g. KUBE_CONFIG_PATH for
	// the kubernetes state backend. Nothing else of the syncer's
	// environment (and never its ServiceAccount token) is passed on.
	TerraformEnv map[string]string
	// KubeVersion is the Kubernetes version charts are rendered for.
	KubeVersion string
}

// NewLibrary compiles the default policies once and returns the Validator.
func NewLibrary(ctx context.Context, opts LibraryOptions) (*Library, error) {
	v, err := validate.New(ctx, validate.Options{
		Terraform: terraform.ExecOptions{ExecPath: opts.TerraformPath, Env: opts.TerraformEnv},
		Helm:      validate.HelmOptions{KubeVersion: opts.KubeVersion},
	})
	if err != nil {
		return nil, fmt.Errorf("load validator: %w", err)
	}
	return &Library{V: v}, nil
}

// Validate implements Validator. A manifest the library refuses (a values
// file missing, say) is a failing verdict, not an error: only a human can
// fix it, and the ChangeRequest says how.
func (l *Library) Validate(ctx context.Context, req Request) (*Result, error) {
	res, err := l.V.CheckService(ctx, validate.ServiceRequest{
		RepoRoot:    req.RepoRoot,
		ServiceDir:  req.Service.Dir,
		Environment: req.Environment,
		Backend:     terraform.BackendKubernetes,
		Kubernetes:  &terraform.KubernetesBackend{Namespace: req.ControlNamespace, SecretSuffix: req.Release},
	})
	var merr *manifest.Error
	switch {
	case errors.As(err, &merr):
		return rejected(manifestProblems(merr)), nil
	case errors.Is(err, validate.ErrChartRepository), errors.Is(err, manifest.ErrOutsideRepo), errors.Is(err, fs.ErrNotExist):
		// Only a change to the repository fixes these; say so in the
		// ChangeRequest instead of retrying.
		return rejected([]sluicev1.Finding{{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "service.yaml", Message: err.Error()}}), nil
	case err != nil:
		return nil, err
	}
	out := &Result{
		Verdict:        convertVerdict(res.Verdict),
		ManifestDigest: sluicev1.Digest(res.ManifestDigest),
		PlanDigest:     sluicev1.Digest(res.PlanDigest),
		PlanFileSHA256: sluicev1.Digest(res.PlanFileSHA256),
		PlanFile:       res.PlanFile,
	}
	if s := res.PlanSummary; s != nil {
		out.PlanSummary = &sluicev1.PlanSummary{Add: int32(s.Add), Change: int32(s.Change), Destroy: int32(s.Destroy)}
	}
	return out, nil
}

// rejected is a failing verdict with findings.
func rejected(findings []sluicev1.Finding) *Result {
	return &Result{Verdict: sluicev1.Verdict{Result: sluicev1.VerdictFail, Risk: sluicev1.RiskHigh, Findings: findings}}
}

func manifestProblems(e *manifest.Error) []sluicev1.Finding {
	out := make([]sluicev1.Finding, 0, len(e.Problems))
	for _, p := range e.Problems {
		out = append(out, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "service.yaml", Message: p.Message, File: p.File, Line: int32(p.Line)})
	}
	if len(out) == 0 {
		out = append(out, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "manifest", Policy: "service.yaml", Message: e.Error()})
	}
	return out
}

// convertVerdict maps the library's verdict onto the API's.
func convertVerdict(v report.Verdict) sluicev1.Verdict {
	out := sluicev1.Verdict{Result: sluicev1.VerdictResult(v.Result), Risk: sluicev1.Risk(v.Risk)}
	for _, f := range v.Findings {
		out.Findings = append(out.Findings, sluicev1.Finding{
			Severity: sluicev1.Severity(f.Severity), Source: f.Source, Policy: f.Policy, Resource: f.Resource,
			Message: f.Message, File: f.File, Line: int32(f.Line),
		})
	}
	return out
}
