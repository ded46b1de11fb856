// Package validate is the validator's entry point for the syncer and the CLI:
// it checks one service environment (manifest, Helm chart, Terraform stack)
// against policy and returns one result with the digests the approval binds to.
//
// A Validator compiles the policies once (New) and is then reused for every
// check; it is safe for concurrent use.
//
// Exported API:
//
//	type Options struct{ Policy policy.Options; Terraform terraform.ExecOptions; Helm HelmOptions }
//	type HelmOptions struct{ KubeVersion string; Timeout time.Duration }
//	func New(ctx, Options) (*Validator, error)          // compiles the policies once
//	func (*Validator) CheckService(ctx, ServiceRequest) (*ServiceResult, error)
//	func (*Validator) RenderService(ctx, ServiceRequest) (*helmcheck.Result, error) // render only, for PreviousManifest
//	func (*Validator) CheckChart(ctx, ChartRequest) (*ChartCheck, error)
//	func (*Validator) CheckPlanJSON(ctx, file string, planJSON []byte) (*PlanCheck, error)
//	func (*Validator) CheckPlanFile(ctx, dir, planFile string) (*PlanCheck, error)
//	func (*Validator) PlanAndCheck(ctx, PlanRequest) (*PlanCheck, error)
//	func (*Validator) CheckObjects(ctx, []policy.Document) (report.Verdict, error)
//	func (*Validator) Engine() *policy.Engine
//	type ServiceRequest struct{ RepoRoot, ServiceDir, Environment, HelmReleaseName, PreviousManifest string;
//	    Confine helmcheck.Confinement; Backend terraform.Backend; Kubernetes *terraform.KubernetesBackend;
//	    Env map[string]string; SkipTerraform bool }
//	type ServiceResult struct{ Service *manifest.Service; Environment *manifest.Environment; Verdict report.Verdict;
//	    ManifestDigest, PlanDigest, PlanFileSHA256 string; PlanFile, PlanJSON []byte; PlanSummary *PlanSummary;
//	    Chart *ChartCheck; Plan *PlanCheck }
//	type ChartRequest struct{ Chart string; ValuesFiles []string; ReleaseName, Namespace, KubeVersion, Previous, SourcePrefix string;
//	    Confine *helmcheck.Confinement }
//	type ChartCheck struct{ Verdict report.Verdict; Render *helmcheck.Result }
//	type PlanRequest struct{ Dir string; Vars map[string]string; Workspace string; Backend terraform.Backend;
//	    Kubernetes *terraform.KubernetesBackend; Env map[string]string; Destroy bool }
//	type PlanCheck struct{ Verdict report.Verdict; Report *terraform.Report; Summary PlanSummary; PlanFile, PlanJSON []byte }
//	type PlanSummary struct{ Add, Change, Destroy int }
//	var ErrChartRepository, ErrNotRendered
//	var ErrTerraformConfiguration // errors.Is: a wrong stack (not worth retrying); errors.As *terraform.RunError for diagnostics
//
// The syncer creates one Validator at start-up and calls CheckService for
// each changed release; it converts report.Finding to the API's Finding
// itself. Findings never carry secret values (policy.Redact).
//
// Errors are returned for input that cannot be checked at all (a manifest
// that does not parse, malformed plan JSON, terraform failing); everything
// the checks find is a finding in the verdict. A terraform failure is a
// *terraform.RunError: ErrTerraformConfiguration when the stack is wrong,
// otherwise a back-end or transient failure. Its Diagnostics (and Error())
// show a diagnostic that may quote what terraform read (state, files) as
// terraform.Withheld; its Details hold the full text, for approvers only.
package validate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// Options configure a Validator.
type Options struct {
	// Policy selects the policies and data (defaults are always embedded).
	Policy policy.Options
	// Terraform configures terraform runs (binary, environment, timeout).
	// Its Analyze.ProtectedTypes/ProtectedTag default to the policies'
	// data.sluice.config.terraform values, so risk and policy agree.
	Terraform terraform.ExecOptions
	// Helm configures chart rendering.
	Helm HelmOptions
}

// HelmOptions configure chart rendering.
type HelmOptions struct {
	// KubeVersion is the Kubernetes version charts are rendered for
	// (Capabilities.KubeVersion), e.g. "1.37.2"; "" uses the renderer's default.
	KubeVersion string
	// Timeout bounds one render; zero uses the renderer's default.
	Timeout time.Duration
}

// Validator checks services, plans and charts with policies compiled once.
type Validator struct {
	opts   Options
	engine *policy.Engine
}

// New compiles the policies and returns a Validator. A policy or data file
// that does not load returns a *policy.CompileError.
func New(ctx context.Context, opts Options) (*Validator, error) {
	engine, err := policy.New(ctx, opts.Policy)
	if err != nil {
		return nil, err
	}
	an := &opts.Terraform.Analyze
	if an.ProtectedTypes == nil {
		an.ProtectedTypes = stringList(engine.Config("terraform", "protected_types"))
	}
	if an.ProtectedTag == "" {
		if tag, ok := engine.Config("terraform", "protected_tag").(string); ok {
			an.ProtectedTag = tag
		}
	}
	return &Validator{opts: opts, engine: engine}, nil
}

// Engine returns the compiled policy engine.
func (v *Validator) Engine() *policy.Engine { return v.engine }

// PlanSummary counts a plan's changes the way `terraform plan` prints them:
// a replace counts as one add and one destroy.
type PlanSummary struct {
	Add     int `json:"add"`
	Change  int `json:"change"`
	Destroy int `json:"destroy"`
}

// String is terraform's "Plan: 1 to add, 0 to change, 2 to destroy."
func (s PlanSummary) String() string {
	return fmt.Sprintf("%d to add, %d to change, %d to destroy", s.Add, s.Change, s.Destroy)
}

// PlanCheck is the result of checking one Terraform plan.
type PlanCheck struct {
	// Verdict: the analysis findings and risk plus the policy findings.
	Verdict report.Verdict
	// Report is the plan analysis: counts, resources, risk, planDigest and,
	// for a plan file, planFileSHA256.
	Report  *terraform.Report
	Summary PlanSummary
	// PlanFile is the binary plan that was checked (nil for plan JSON input).
	PlanFile []byte
	PlanJSON []byte
	// Secrets are the secret strings the policy engine found in the plan
	// and redacted from the findings (longest first): whatever else shows
	// this plan redacts them too (review.Input.PlanSecrets). Never
	// serialised.
	Secrets []string `json:"-"`
}

// CheckPlanJSON checks plan JSON (terraform show -json); file names the input
// in findings.
func (v *Validator) CheckPlanJSON(ctx context.Context, file string, planJSON []byte) (*PlanCheck, error) {
	// The analysis and the policies read the plan independently; run them
	// side by side. A plan the reader refuses is reported as its error, even
	// when the policies would have run.
	type analysis struct {
		rep *terraform.Report
		err error
	}
	done := make(chan analysis, 1)
	go func() {
		rep, err := terraform.Analyze(planJSON, v.opts.Terraform.Analyze)
		done <- analysis{rep, err}
	}()
	findings, secrets, policyErr := v.evalPlan(ctx, file, planJSON)
	a := <-done
	if a.err != nil {
		return nil, a.err
	}
	if policyErr != nil {
		return nil, policyErr
	}
	return v.planCheck(&terraform.PlanResult{PlanJSON: planJSON, Report: a.rep}, findings, secrets), nil
}

// CheckPlanFile shows a binary plan file of the initialised stack folder dir
// as JSON (terraform show -json) and checks it.
func (v *Validator) CheckPlanFile(ctx context.Context, dir, planFile string) (*PlanCheck, error) {
	res, err := terraform.ShowPlanFile(ctx, v.opts.Terraform, dir, planFile)
	if err != nil {
		return nil, err
	}
	return v.checkPlan(ctx, planFile, res)
}

// PlanRequest says which stack to plan and how.
type PlanRequest struct {
	// Root holds everything the stack may reference (its local modules);
	// a terraform runner ships it. "" means Dir.
	Root string
	// Dir is the stack folder (absolute, or relative to the working folder).
	Dir string
	// Vars are passed as -var name=value; Workspace is selected or created.
	Vars      map[string]string
	Workspace string
	// Backend chooses the state: the stack's own, the kubernetes backend
	// override (with Kubernetes), or none for a stateless check ("").
	Backend    terraform.Backend
	Kubernetes *terraform.KubernetesBackend
	// Env is added to the Validator's terraform environment for this run
	// (e.g. KUBE_CONFIG_PATH or cloud credentials).
	Env map[string]string
	// Destroy makes a destroy plan.
	Destroy bool
}

// PlanAndCheck plans a stack through terraform-exec and checks the plan. The
// result carries the plan file to store and apply.
func (v *Validator) PlanAndCheck(ctx context.Context, req PlanRequest) (*PlanCheck, error) {
	exec := v.opts.Terraform
	if len(req.Env) > 0 {
		env := make(map[string]string, len(exec.Env)+len(req.Env))
		for k, val := range exec.Env {
			env[k] = val
		}
		for k, val := range req.Env {
			env[k] = val
		}
		exec.Env = env
	}
	res, err := terraform.Plan(ctx, terraform.PlanOptions{
		ExecOptions: exec,
		Root:        req.Root,
		Dir:         req.Dir,
		Vars:        req.Vars,
		Workspace:   req.Workspace,
		Backend:     req.Backend,
		Kubernetes:  req.Kubernetes,
		Destroy:     req.Destroy,
	})
	if err != nil {
		return nil, err
	}
	return v.checkPlan(ctx, req.Dir, res)
}

func (v *Validator) checkPlan(ctx context.Context, file string, res *terraform.PlanResult) (*PlanCheck, error) {
	findings, secrets, err := v.evalPlan(ctx, file, res.PlanJSON)
	if err != nil {
		return nil, err
	}
	return v.planCheck(res, findings, secrets), nil
}

// evalPlan evaluates the Terraform policies on plan JSON.
func (v *Validator) evalPlan(ctx context.Context, file string, planJSON []byte) ([]report.Finding, []string, error) {
	// The plan goes straight to OPA's value, without a map[string]any in
	// between; input ParseJSON does not take is decoded by encoding/json,
	// which reports the error.
	var doc any
	if value, ok := policy.ParseJSON(planJSON); ok {
		doc = value
	} else {
		var err error
		if doc, err = decodeJSON(planJSON); err != nil {
			return nil, nil, fmt.Errorf("plan JSON: %w", err)
		}
	}
	return v.engine.EvalSecrets(ctx, policy.KindTerraform, []policy.Document{{Path: file, Value: doc}})
}

// planCheck combines the analysis and the policy findings.
func (v *Validator) planCheck(res *terraform.PlanResult, policyFindings []report.Finding, secrets []string) *PlanCheck {
	rep := res.Report
	findings := append(append([]report.Finding(nil), rep.Findings...), policyFindings...)
	c := rep.Counts
	return &PlanCheck{
		Verdict:  report.NewVerdict(rep.Risk, findings),
		Report:   rep,
		Summary:  PlanSummary{Add: c.Create + c.Replace, Change: c.Update, Destroy: c.Delete + c.Replace},
		PlanFile: res.PlanFile,
		PlanJSON: res.PlanJSON,
		Secrets:  secrets,
	}
}

// CheckObjects evaluates the Kubernetes policies against rendered objects
// (per object, and the combined checks over all of them).
func (v *Validator) CheckObjects(ctx context.Context, docs []policy.Document) (report.Verdict, error) {
	fs, err := v.engine.Eval(ctx, policy.KindKubernetes, docs)
	if err != nil {
		return report.Verdict{}, err
	}
	return report.NewVerdict(report.RiskLow, fs), nil
}

// decodeJSON decodes one JSON document for policy input, keeping numbers
// exact; trailing data is an error.
func decodeJSON(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("unexpected data after the JSON document")
	}
	return v, nil
}

func stringList(v any) []string {
	list, ok := v.([]any)
	if !ok {
		return nil
	}
	out := make([]string, 0, len(list))
	for _, x := range list {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
