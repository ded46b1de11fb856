package validation

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Library is the Validator backed by the infra-validator library: Helm
// render and checks, and a Terraform plan against the release's state in
// the control namespace (the kubernetes backend's Secret, secret_suffix =
// the release, reached through the state server with a plan-only
// credential for that one state; DESIGN.md §5), run in a terraform
// runner that holds nothing of the syncer.
type Library struct {
	V     *validate.Validator
	state StateGranter
	// bundle is the digest of the policies V evaluates.
	bundle sluicev1.Digest
}

// StateGranter hands out run credentials for one release's state
// (*tfstate.Server).
type StateGranter interface {
	Grant(g tfstate.Grant) (tfstate.Credential, error)
	// Revoke ends a credential whose run died, freeing its lock.
	Revoke(ctx context.Context, c tfstate.Credential) error
}

// LibraryOptions configure NewLibrary.
type LibraryOptions struct {
	// TerraformPath is the terraform binary ("" looks it up in PATH).
	TerraformPath string
	// TerraformEnv reaches terraform in its runner (provider settings the
	// syncer was configured to pass); its values are redacted from every
	// finding and message. Nothing else of the syncer's environment, and
	// never its ServiceAccount token, is passed on.
	TerraformEnv map[string]string
	// Runner runs terraform (runner.Local or runner.Remote). Required
	// with State.
	Runner terraform.Runner
	// State grants each plan a ModePlan credential for its release's
	// state. nil plans statelessly (every resource new), for setups
	// without Terraform state such as Helm-only tests.
	State StateGranter
	// KubeVersion is the Kubernetes version charts are rendered for.
	KubeVersion string
}

// NewLibrary compiles the default policies once and returns the Validator.
func NewLibrary(ctx context.Context, opts LibraryOptions) (*Library, error) {
	if opts.State != nil && opts.Runner == nil {
		return nil, errors.New("load validator: a state server needs a terraform runner")
	}
	vopts := validate.Options{
		Terraform: terraform.ExecOptions{ExecPath: opts.TerraformPath, Env: opts.TerraformEnv, Runner: opts.Runner},
		Helm:      validate.HelmOptions{KubeVersion: opts.KubeVersion},
	}
	v, err := validate.New(ctx, vopts)
	if err != nil {
		return nil, fmt.Errorf("load validator: %w", err)
	}
	bundle, err := policy.BundleDigest(vopts.Policy)
	if err != nil {
		return nil, fmt.Errorf("load validator: %w", err)
	}
	return &Library{V: v, state: opts.State, bundle: sluicev1.Digest(bundle)}, nil
}

// Validate implements Validator. A manifest the library refuses (a values
// file missing, say) or a Terraform stack terraform refuses (a syntax
// error, an undeclared variable) is a failing verdict, not an error: only a
// human can fix it, and the ChangeRequest's findings say how (file and line
// when terraform names them). A failing state backend or a timeout is an
// error, so the sync is retried.
func (l *Library) Validate(ctx context.Context, req Request) (*Result, error) {
	res, err := l.validate(ctx, req)
	if res != nil {
		// Every verdict, a rejection included, came from this bundle.
		res.PolicyBundleDigest = l.bundle
	}
	return res, err
}

func (l *Library) validate(ctx context.Context, req Request) (*Result, error) {
	previous, prevErr := l.previousManifest(ctx, req)
	sreq := validate.ServiceRequest{
		RepoRoot:         req.RepoRoot,
		ServiceDir:       req.Service.Dir,
		Environment:      req.Environment,
		PreviousManifest: previous,
		Confine:          req.Confine,
	}
	var granted *tfstate.Credential
	if l.state != nil && req.Service.TerraformDir() != "" {
		workspace := ""
		if env, ok := req.Service.Environment(req.Environment); ok && env.Terraform != nil {
			workspace = env.Terraform.Workspace
		}
		// The credential (and a lock its run may leave behind) lives as
		// long as the run may, unless the run is known lost (endLostRun).
		cred, err := l.state.Grant(tfstate.Grant{Namespace: req.ControlNamespace, Release: req.Release, Workspace: workspace, Mode: tfstate.ModePlan, TTL: terraform.DefaultTimeout + 5*time.Minute})
		if err != nil {
			return rejected([]sluicev1.Finding{{Severity: sluicev1.SeverityDeny, Source: "terraform", Policy: "terraform.state", Message: "no state credential: " + err.Error()}}), nil
		}
		sreq.Backend, sreq.Env = terraform.BackendHTTP, cred.Env()
		granted = &cred
	}
	res, err := l.checkService(ctx, sreq, req.Service)
	if granted != nil {
		l.endLostRun(ctx, *granted, err)
	}
	var merr *manifest.Error
	var tfErr *terraform.RunError
	switch {
	case errors.As(err, &merr):
		return rejected(manifestProblems(merr)), nil
	case errors.As(err, &tfErr) && tfErr.Kind == terraform.ErrorConfiguration:
		// A wrong stack fails the same way on every retry: reject the
		// change with terraform's diagnostics. Back-end failures fall
		// through to the retry below.
		out := rejected(terraformProblems(tfErr, req.Service.TerraformDir()))
		if tfErr.HasWithheld() {
			out.PlanErrorDetails = tfErr.DetailsText()
		}
		return out, nil
	case errors.Is(err, validate.ErrChartRepository), errors.Is(err, manifest.ErrOutsideRepo), errors.Is(err, fs.ErrNotExist),
		errors.Is(err, chartrepo.ErrDigestMismatch), errors.Is(err, chartrepo.ErrUnsafeArchive), errors.Is(err, chartrepo.ErrTooLarge):
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
	if res.Chart != nil && res.Chart.Render != nil {
		out.Manifest = res.Chart.Render.Rendered
		out.RiskReasons = res.Chart.Render.RiskReasons
	}
	if res.Plan != nil && res.Plan.Report != nil {
		out.Plan, out.PlanSecrets = res.Plan.Report.Plan, res.Plan.Secrets
	}
	out.PreviousManifest = previous
	if prevErr != nil {
		// As helmcheck rates an unreadable previous manifest: without it,
		// removed objects cannot be seen.
		log.FromContext(ctx).Info("Previous revision not rendered; Helm risk rated high", "release", req.Release, "previous", req.Previous.Revision, "reason", prevErr.Error())
		out.Verdict.Risk = sluicev1.RiskHigh
		out.Verdict.Findings = append(out.Verdict.Findings, sluicev1.Finding{
			Severity: sluicev1.SeverityWarn, Source: "helm", Policy: "helm.previous_manifest",
			Message: fmt.Sprintf("the previous revision %s could not be rendered (%s), so removed objects cannot be detected; risk is rated high", sluicev1.ShortSHA(req.Previous.Revision), prevErr),
		})
		if out.Verdict.Result == sluicev1.VerdictPass {
			out.Verdict.Result = sluicev1.VerdictWarn
		}
	}
	return out, nil
}

// endLostRun revokes cred when its run ended without a result (the runner
// died, err wraps terraform.ErrRunnerLost): a lock the run held is freed
// at once, so the retry need not wait for the credential to expire, and
// the credential opens nothing any more. Plans never write the state, so
// this holds even when a runner workload lost only the connection.
func (l *Library) endLostRun(ctx context.Context, cred tfstate.Credential, err error) {
	if !errors.Is(err, terraform.ErrRunnerLost) {
		return
	}
	if rerr := l.state.Revoke(context.WithoutCancel(ctx), cred); rerr != nil {
		log.FromContext(ctx).Error(rerr, "Freeing the state lock of a lost terraform run failed; it frees when the run's credential expires")
	}
}

// checkService is V.CheckService with the Terraform plan run beside the
// chart's render and checks instead of after them: the plan mostly waits
// on terraform in its runner, the chart on this process. The result and
// the errors are CheckService's: a chart or manifest error comes first
// (the plan is then stopped and dropped), then a plan error.
func (l *Library) checkService(ctx context.Context, sreq validate.ServiceRequest, svc *manifest.Service) (*validate.ServiceResult, error) {
	tfDir := ""
	if svc != nil {
		tfDir = svc.TerraformDir()
	}
	if tfDir == "" || sreq.SkipTerraform {
		return l.V.CheckService(ctx, sreq)
	}
	dir, err := manifest.ConfinedPath(sreq.RepoRoot, tfDir)
	if err != nil {
		return l.V.CheckService(ctx, sreq) // reports it after the chart's problems, as always
	}
	pr := validate.PlanRequest{Root: sreq.RepoRoot, Dir: dir, Backend: sreq.Backend, Kubernetes: sreq.Kubernetes, Env: sreq.Env}
	if env, ok := svc.Environment(sreq.Environment); ok && env.Terraform != nil {
		pr.Vars, pr.Workspace = env.Terraform.Vars, env.Terraform.Workspace
	}
	planCtx, stopPlan := context.WithCancel(ctx)
	defer stopPlan()
	type planned struct {
		check *validate.PlanCheck
		err   error
	}
	plans := make(chan planned, 1)
	go func() {
		c, err := l.V.PlanAndCheck(planCtx, pr)
		plans <- planned{c, err}
	}()

	chartOnly := sreq
	chartOnly.SkipTerraform = true
	out, err := l.V.CheckService(ctx, chartOnly)
	if err != nil {
		return nil, err
	}
	p := <-plans
	if p.err != nil {
		return nil, fmt.Errorf("service %s/%s terraform: %w", out.Service.Name, out.Environment.Name, p.err)
	}
	plan := p.check
	// Findings name the stack folder relative to the checkout.
	for i := range plan.Verdict.Findings {
		if plan.Verdict.Findings[i].File == dir {
			plan.Verdict.Findings[i].File = filepath.ToSlash(tfDir)
		}
	}
	out.Plan = plan
	out.PlanDigest = plan.Report.PlanDigest
	out.PlanFileSHA256 = plan.Report.PlanFileSHA256
	out.PlanFile = plan.PlanFile
	out.PlanJSON = plan.PlanJSON
	summary := plan.Summary
	out.PlanSummary = &summary
	findings := append(append([]report.Finding(nil), out.Verdict.Findings...), plan.Verdict.Findings...)
	out.Verdict = report.NewVerdict(report.MaxRisk(out.Verdict.Risk, plan.Verdict.Risk), findings)
	return out, nil
}

// previousManifest returns what the release rendered (manifests and
// hooks) at its last applied revision: the remembered one, or a render of the previous inputs with
// the options CheckService uses (release name, the environment's
// namespace at that revision, Kubernetes version). ("", nil)
// means a first change; an error means the previous revision exists but
// could not be rendered.
func (l *Library) previousManifest(ctx context.Context, req Request) (string, error) {
	prev := req.Previous
	switch {
	case prev == nil:
		return "", nil
	case prev.Err != nil:
		return "", prev.Err
	case prev.Manifest != "":
		return prev.Manifest, nil
	case prev.Service == nil || prev.RepoRoot == "":
		return "", errors.New("no inputs to render")
	}
	res, err := l.V.RenderService(ctx, validate.ServiceRequest{
		RepoRoot: prev.RepoRoot, ServiceDir: prev.Service.Dir, Environment: req.Environment,
	})
	if err != nil {
		return "", err
	}
	return res.Rendered, nil
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

// terraformProblems turns terraform's diagnostics into deny findings,
// naming files relative to the repository (a diagnostic without a
// location points at the stack folder).
func terraformProblems(e *terraform.RunError, stackDir string) []sluicev1.Finding {
	policy := "terraform." + e.Step
	out := make([]sluicev1.Finding, 0, len(e.Diagnostics))
	for _, d := range e.Diagnostics {
		f := sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "terraform", Policy: policy, File: stackDir, Message: d.Summary}
		if d.Detail != "" {
			f.Message += ": " + d.Detail
		}
		if d.File != "" {
			if file := path.Join(stackDir, filepath.ToSlash(d.File)); !path.IsAbs(d.File) && file != ".." && !strings.HasPrefix(file, "../") {
				f.File, f.Line = file, int32(d.Line)
			} else {
				f.Message = fmt.Sprintf("%s (in %s line %d)", f.Message, path.Base(filepath.ToSlash(d.File)), d.Line)
			}
		}
		out = append(out, f)
	}
	if len(out) == 0 {
		out = append(out, sluicev1.Finding{Severity: sluicev1.SeverityDeny, Source: "terraform", Policy: policy, File: stackDir, Message: e.Error()})
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
