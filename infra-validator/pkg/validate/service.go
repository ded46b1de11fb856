package validate

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/sources"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// ServiceRequest names one service environment in a checkout.
type ServiceRequest struct {
	// RepoRoot is the checkout folder; ServiceDir is the service folder
	// relative to it (holding service.yaml).
	RepoRoot   string
	ServiceDir string
	// Environment is the environment's name in the manifest.
	Environment string
	// HelmReleaseName is the Helm release to render as; "" means
	// "<service>-<environment>", the Release name, which the Helm applier
	// must use too for manifestDigest to match.
	HelmReleaseName string
	// PreviousManifest is what the release's last applied revision
	// rendered (helmcheck.Result.Rendered, hooks included), for the Helm
	// risk; "" when nothing was applied, so every object is new.
	PreviousManifest string
	// Confine is where the release's objects may go besides the
	// environment's namespace (the Repository's allowedExtraNamespaces and
	// allowedClusterKinds); the zero value allows nothing else. Every
	// other object is a deny finding (helm.namespace).
	Confine helmcheck.Confinement
	// Backend, Kubernetes and Env choose the Terraform state and credentials
	// (see PlanRequest); the zero value plans statelessly.
	Backend    terraform.Backend
	Kubernetes *terraform.KubernetesBackend
	Env        map[string]string
	// SkipTerraform leaves the Terraform stack out (e.g. the CLI's
	// --no-terraform).
	SkipTerraform bool
}

// ServiceResult is the one result of checking a service environment.
type ServiceResult struct {
	Service     *manifest.Service
	Environment *manifest.Environment
	// Verdict combines the chart and plan checks: result and findings of
	// both, risk the higher of the two.
	Verdict report.Verdict
	// ManifestDigest is the Helm manifestDigest ("" when the chart did not render).
	ManifestDigest string
	// PlanDigest, PlanFileSHA256, PlanFile and PlanJSON are set when the
	// service has a Terraform stack; PlanFile is the very file that was
	// checked, for the syncer to store.
	PlanDigest     string
	PlanFileSHA256 string
	PlanFile       []byte
	PlanJSON       []byte
	PlanSummary    *PlanSummary
	// Chart and Plan are the detailed results (nil when not checked).
	Chart *ChartCheck
	Plan  *PlanCheck
}

// ErrChartRepository is returned for a service whose chart comes from a chart
// repository when the content holds no fetched chart for it
// (sources.RemoteChartDir): the validator never fetches; the syncer does,
// and puts the chart's bytes in the artifact.
var ErrChartRepository = errors.New("the chart comes from a chart repository")

// CheckService loads the manifest, checks the environment's chart and plans
// and checks its Terraform stack, and returns one result. A manifest that
// does not parse returns a *manifest.Error; paths leaving the checkout are
// refused by the manifest package.
func (v *Validator) CheckService(ctx context.Context, req ServiceRequest) (*ServiceResult, error) {
	svc, env, creq, err := serviceChart(req)
	if err != nil {
		return nil, err
	}
	out := &ServiceResult{Service: svc, Environment: env}
	var findings []report.Finding
	risk := report.RiskLow

	confine := req.Confine
	creq.Confine = &confine
	chart, err := v.CheckChart(ctx, creq)
	if err != nil {
		return nil, fmt.Errorf("service %s/%s chart: %w", svc.Name, env.Name, err)
	}
	out.Chart = chart
	out.ManifestDigest = chart.Render.ManifestDigest
	findings = append(findings, chart.Verdict.Findings...)
	risk = report.MaxRisk(risk, chart.Verdict.Risk)

	if tfDir := svc.TerraformDir(); tfDir != "" && !req.SkipTerraform {
		dir, err := manifest.ConfinedPath(req.RepoRoot, tfDir)
		if err != nil {
			return nil, err
		}
		pr := PlanRequest{Root: req.RepoRoot, Dir: dir, Backend: req.Backend, Kubernetes: req.Kubernetes, Env: req.Env}
		if env.Terraform != nil {
			pr.Vars, pr.Workspace = env.Terraform.Vars, env.Terraform.Workspace
		}
		plan, err := v.PlanAndCheck(ctx, pr)
		if err != nil {
			return nil, fmt.Errorf("service %s/%s terraform: %w", svc.Name, env.Name, err)
		}
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
		findings = append(findings, plan.Verdict.Findings...)
		risk = report.MaxRisk(risk, plan.Verdict.Risk)
	}
	out.Verdict = report.NewVerdict(risk, findings)
	return out, nil
}

// serviceChart loads the manifest of req and says how to render the
// environment's chart: the chart folder and values files confined to the
// checkout, the release name and the environment's namespace.
func serviceChart(req ServiceRequest) (*manifest.Service, *manifest.Environment, ChartRequest, error) {
	svc, err := manifest.Load(req.RepoRoot, req.ServiceDir)
	if err != nil {
		return nil, nil, ChartRequest{}, err
	}
	if err := svc.CheckPaths(req.RepoRoot); err != nil {
		return nil, nil, ChartRequest{}, err
	}
	env, ok := svc.Environment(req.Environment)
	if !ok {
		return nil, nil, ChartRequest{}, fmt.Errorf("service %s has no environment %q", svc.Name, req.Environment)
	}
	release := req.HelmReleaseName
	if release == "" {
		release = svc.Name + "-" + env.Name
	}
	if env.Source() != manifest.SourceChart {
		// A Kustomize overlay or manifests folder, as a generated chart.
		ch, err := sources.EnvironmentChart(req.RepoRoot, svc, env.Name)
		if err != nil {
			return nil, nil, ChartRequest{}, err
		}
		return svc, env, ChartRequest{
			Chart:       string(env.Source()) + " " + svc.KustomizeDir(env.Name) + svc.ManifestsDir(env.Name),
			Loaded:      ch,
			Generated:   true,
			ReleaseName: release,
			Namespace:   env.Namespace,
			Previous:    req.PreviousManifest,
		}, nil
	}
	values, err := svc.ValuesFiles(env.Name)
	if err != nil {
		return nil, nil, ChartRequest{}, err
	}
	chartDir := svc.ChartDirOf(env.Name)
	var remote *chart.Chart
	if chartDir == "" {
		// A chart from a chart repository: the syncer fetched it into the
		// content (sources.RemoteChartDir), checked here against its digest.
		ch, r, err := sources.RemoteChart(req.RepoRoot, svc, env.Name)
		if err != nil {
			if errors.Is(err, sources.ErrRemoteChartMissing) {
				return nil, nil, ChartRequest{}, fmt.Errorf("service %s: %w: %w", svc.Name, ErrChartRepository, err)
			}
			return nil, nil, ChartRequest{}, err
		}
		remote, chartDir = ch, r.Name+" "+r.Version+" from "+r.Repo
	}
	chartPath := chartDir
	if remote == nil {
		if chartPath, err = manifest.ConfinedPath(req.RepoRoot, chartDir); err != nil {
			return nil, nil, ChartRequest{}, err
		}
	}
	valuePaths := make([]string, 0, len(values))
	for _, f := range values {
		p, err := manifest.ConfinedPath(req.RepoRoot, f)
		if err != nil {
			return nil, nil, ChartRequest{}, err
		}
		valuePaths = append(valuePaths, p)
	}
	prefix := path.Clean(chartDir)
	if remote != nil {
		prefix = ""
	}
	return svc, env, ChartRequest{
		Chart:        chartPath,
		Loaded:       remote,
		ValuesFiles:  valuePaths,
		ReleaseName:  release,
		Namespace:    env.Namespace,
		Previous:     req.PreviousManifest,
		SourcePrefix: prefix,
	}, nil
}

// ErrTerraformConfiguration matches (errors.Is) an error of CheckService
// or PlanAndCheck caused by a wrong Terraform stack (a syntax error, an
// undeclared variable, what `terraform validate` reports): only a change to
// the repository fixes it. errors.As with *terraform.RunError gives
// terraform's diagnostics (file and line when terraform names them). Any
// other terraform failure (the state backend unreachable, a timeout) is
// worth retrying.
var ErrTerraformConfiguration = terraform.ErrConfiguration

// ErrNotRendered is returned by RenderService for a chart that does not
// render (a template error, values refused by the schema).
var ErrNotRendered = errors.New("the chart does not render")

// RenderService renders the environment's chart of a service exactly as
// CheckService does (same release name, namespace and Kubernetes version),
// without policies or Terraform. The syncer renders a release at its
// previous revision with it, for CheckService's PreviousManifest. A chart
// that does not render returns an error wrapping ErrNotRendered with the
// first reason.
func (v *Validator) RenderService(ctx context.Context, req ServiceRequest) (*helmcheck.Result, error) {
	svc, env, creq, err := serviceChart(req)
	if err != nil {
		return nil, err
	}
	res, err := helmcheck.Render(ctx, v.helmOptions(creq))
	if err != nil {
		return nil, fmt.Errorf("service %s/%s chart: %w", svc.Name, env.Name, err)
	}
	if res.ManifestDigest == "" {
		reason := "no manifest"
		for _, f := range res.Findings {
			if f.Severity == report.SeverityDeny {
				reason = f.Message
				break
			}
		}
		return nil, fmt.Errorf("service %s/%s: %w: %s", svc.Name, env.Name, ErrNotRendered, reason)
	}
	return res, nil
}
