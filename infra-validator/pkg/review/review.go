// Package review renders what a reviewer approves: for each ChangeRequest,
// its verdict, risk and reasons, findings, the Terraform plan (from
// `terraform show -json`), the rendered manifest as a unified diff per
// object against the release's last applied revision, and the approval
// state with the approvalDigest a review binds to. Markdown renders it as
// pull-request comments (split under a provider's size limit), Text for a
// terminal (`kubectl sluice diff`).
//
// Everything shown passes through policy.Redactor, the redaction findings
// get (secret values of the inputs, credential-shaped strings), and Secret
// objects are shown by their keys only. The package is pure: no I/O.
package review

import (
	"fmt"
	"sort"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Input is everything one section is built from.
type Input struct {
	// Change is the ChangeRequest (spec, and status for the approval
	// state).
	Change *sluicev1.ChangeRequest
	// Plan is the change's plan as the validator decoded it
	// (terraform.Report.Plan), so it is not decoded twice; PlanJSON,
	// `terraform show -json` of the plan, is decoded when Plan is nil.
	// Both nil: the release has no Terraform stack.
	Plan     *tfjson.Plan
	PlanJSON []byte
	// Manifest is what the chart rendered at the change's revision;
	// PreviousManifest what it rendered at AppliedRevision, the release's
	// last applied revision ("" when nothing was applied: every object is
	// new).
	Manifest         string
	PreviousManifest string
	AppliedRevision  string
	// RiskReasons say why the risk is what it is (the validator's).
	RiskReasons []string
	// Secrets are further values to hide (credentials a run was given).
	Secrets []string
	// PreviousChart is the chart of the release's last applied change,
	// for the chart version diff of a chart from a chart repository (nil
	// when nothing was applied or it had no such chart).
	PreviousChart *sluicev1.ChartSource
	// PreviousHelmCharts are the charts the last applied change's overlay
	// inflated (spec.source.helmCharts), for their version diffs.
	PreviousHelmCharts []sluicev1.ChartSource
	// PlanSecrets, when not nil, are the secret strings the validator's
	// policy engine found in this plan's whole document
	// (validate.PlanCheck.Secrets): Build takes them instead of walking
	// the plan's resource changes again. nil: Build gathers them itself.
	PlanSecrets []string
}

// Section is one ChangeRequest as a reviewer reads it, redacted.
type Section struct {
	Change          string
	Namespace       string
	Release         string
	Operation       string
	Revision        string
	AppliedRevision string
	PullRequest     int64
	Verdict         string
	Risk            string
	RiskReasons     []string
	// Findings, deny first, then unverifiable, warn and info.
	Findings  []Finding
	Truncated int32
	// Plan is nil without Terraform.
	Plan *Plan
	// Objects are the rendered objects that differ from the applied
	// revision; Unchanged counts the rest. ManifestErr says why the
	// manifest could not be compared ("" when it could).
	Objects     []ObjectDiff
	Unchanged   int
	HasManifest bool
	ManifestErr string
	Approval    Approval
	// Chart is the chart from a chart repository the change installs,
	// with the applied one; nil for charts in the repository.
	Chart *ChartChange `json:",omitempty"`
	// HelmCharts are the charts the overlay's helmCharts entries inflate,
	// each with the applied one of the same repository and name.
	HelmCharts []*ChartChange `json:",omitempty"`
	// Verification is the verification after apply as the operator
	// recorded it; nil before the change is verified (and for previews,
	// which are never applied).
	Verification *Verification `json:",omitempty"`
	// Trimmed: the stored section lost its plan attributes and diff lines
	// to fit a ConfigMap (Trim).
	Trimmed bool `json:",omitempty"`
}

// ChartChange is a chart from a chart repository: the change's exact
// version and digest, and the applied change's ("" when none).
type ChartChange struct {
	Repo, Name                      string
	Version, Digest                 string
	PreviousVersion, PreviousDigest string
}

// Line says the chart and its version change in one line.
func (c *ChartChange) Line() string {
	now := fmt.Sprintf("%s %s (%s)", c.Name, c.Version, shortDigest(c.Digest))
	switch {
	case c.PreviousDigest == "":
		return fmt.Sprintf("Chart %s from %s, nothing applied from a chart repository yet", now, c.Repo)
	case c.PreviousDigest == c.Digest:
		return fmt.Sprintf("Chart %s from %s, as applied", now, c.Repo)
	case c.PreviousVersion == c.Version:
		return fmt.Sprintf("Chart %s from %s: the repository now serves other bytes for %s than the applied %s", now, c.Repo, c.Version, shortDigest(c.PreviousDigest))
	}
	return fmt.Sprintf("Chart %s %s → %s from %s (%s → %s)", c.Name, c.PreviousVersion, c.Version, c.Repo, shortDigest(c.PreviousDigest), shortDigest(c.Digest))
}

func shortDigest(d string) string {
	if len(d) > len("sha256:")+12 {
		return d[:len("sha256:")+12]
	}
	return d
}

// Finding is one finding as shown.
type Finding struct {
	Severity string
	Policy   string
	Resource string
	File     string
	Line     int32
	Message  string
}

// Where is the finding's file:line ("" when unknown).
func (f Finding) Where() string {
	switch {
	case f.File == "":
		return ""
	case f.Line > 0:
		return fmt.Sprintf("%s:%d", f.File, f.Line)
	}
	return f.File
}

// Approval is the gate's state as the operator last recorded it.
type Approval struct {
	// Effective is true when the operator has computed the effective
	// rule; the change's own rule is shown otherwise.
	Effective       bool
	Required        int32
	Approvers       []string
	AllOf           [][]string
	AllowAuthor     bool
	NoApprovers     bool
	AutoApproveRisk string
	ApprovedBy      []string
	RejectedBy      []string
	// Needed is how many more approvals the gate waits for.
	Needed int32
	Phase  string
	Digest string
}

var severityOrder = map[sluicev1.Severity]int{sluicev1.SeverityDeny: 0, sluicev1.SeverityUnverifiable: 1, sluicev1.SeverityWarn: 2, sluicev1.SeverityInfo: 3}

// Build turns one ChangeRequest with its plan and manifests into a
// redacted Section. A plan or manifest that does not parse is reported in
// the section, never an error: the comment still shows the rest.
func Build(in Input) (*Section, error) {
	cr := in.Change
	if cr == nil {
		return nil, fmt.Errorf("no ChangeRequest")
	}
	plan, planErr := in.Plan, error(nil)
	if plan == nil {
		plan, planErr = parsePlan(in.PlanJSON)
	}
	planDoc := planValues(plan, in.PlanSecrets == nil)
	cur, curDocs, curErr := splitObjects(in.Manifest)
	prev, prevDocs, prevErr := splitObjects(in.PreviousManifest)
	inputs := []any{curDocs, prevDocs}
	if planDoc != nil {
		inputs = append(inputs, planDoc)
	}
	extra := in.Secrets
	if in.PlanSecrets != nil {
		extra = append(append([]string(nil), in.Secrets...), in.PlanSecrets...)
	}
	red := policy.NewRedactor(extra, inputs...)

	s := &Section{
		Change: cr.Name, Namespace: cr.Namespace, Release: cr.Spec.Release, Operation: string(cr.Spec.Operation),
		Revision: cr.Spec.Revision, AppliedRevision: in.AppliedRevision,
		Verdict: string(cr.Spec.Verdict.Result), Risk: string(cr.Spec.Verdict.Risk), Truncated: cr.Spec.Verdict.FindingsTruncated,
	}
	if s.Operation == "" {
		s.Operation = string(sluicev1.OperationApply)
	}
	if cr.Spec.PullRequest != nil {
		s.PullRequest = cr.Spec.PullRequest.Number
	}
	if src := cr.Spec.Source; src != nil && src.Chart.Repo != "" {
		s.Chart = &ChartChange{Repo: src.Chart.Repo, Name: src.Chart.Name, Version: src.Chart.Version, Digest: string(src.Chart.Digest)}
		if p := in.PreviousChart; p != nil && p.Repo == src.Chart.Repo && p.Name == src.Chart.Name {
			s.Chart.PreviousVersion, s.Chart.PreviousDigest = p.Version, string(p.Digest)
		}
	}
	if src := cr.Spec.Source; src != nil {
		for _, c := range src.HelmCharts {
			cc := &ChartChange{Repo: c.Repo, Name: c.Name, Version: c.Version, Digest: string(c.Digest)}
			for _, p := range in.PreviousHelmCharts {
				if p.Repo == c.Repo && p.Name == c.Name {
					cc.PreviousVersion, cc.PreviousDigest = p.Version, string(p.Digest)
					break
				}
			}
			s.HelmCharts = append(s.HelmCharts, cc)
		}
	}
	for _, r := range in.RiskReasons {
		s.RiskReasons = append(s.RiskReasons, red.String(r))
	}
	fs := append([]sluicev1.Finding(nil), cr.Spec.Verdict.Findings...)
	sort.SliceStable(fs, func(i, j int) bool { return severityOrder[fs[i].Severity] < severityOrder[fs[j].Severity] })
	for _, f := range fs {
		s.Findings = append(s.Findings, Finding{Severity: string(f.Severity), Policy: red.String(f.Policy), Resource: red.String(f.Resource),
			File: red.String(f.File), Line: f.Line, Message: red.String(f.Message)})
	}

	switch {
	case planErr != nil:
		s.Plan = &Plan{Err: red.String(planErr.Error())}
	case plan != nil:
		s.Plan = buildPlan(plan, red)
		if len(in.RiskReasons) == 0 {
			s.RiskReasons = append(s.RiskReasons, s.Plan.riskReasons()...)
		}
	}

	if in.Manifest != "" || in.PreviousManifest != "" {
		s.HasManifest = true
		switch {
		case curErr != nil:
			s.ManifestErr = red.String(curErr.Error())
		case prevErr != nil:
			s.ManifestErr = red.String("the applied revision's manifest: " + prevErr.Error())
		default:
			s.Objects, s.Unchanged = diffObjects(prev, cur, in.AppliedRevision, red)
		}
	}
	s.Approval = approvalOf(cr)
	s.Verification = verificationOf(cr)
	return s, nil
}

// Verification is a change's verification after apply, as shown.
type Verification struct {
	Phase   string
	Message string
	// SettledBy and SettledReason: who settled an inconclusive
	// verification, and why.
	SettledBy, SettledReason string
	// Measurements are the newest measurements, oldest first; Dropped
	// counts older ones left out.
	Measurements []Measurement
	Dropped      int32
}

// Measurement is one measurement as shown.
type Measurement struct {
	Check, Phase, Value, Message, Query, Time string
}

// verificationOf reads the verification the operator recorded (nil for
// none).
func verificationOf(cr *sluicev1.ChangeRequest) *Verification {
	st := cr.Status.Verification
	if st == nil {
		return nil
	}
	v := &Verification{Phase: string(cr.Status.Phase), Message: st.Message, Dropped: st.MeasurementsDropped}
	if s := st.Settled; s != nil {
		v.SettledBy, v.SettledReason = string(s.Approver), s.Reason
	}
	for _, m := range st.Measurements {
		v.Measurements = append(v.Measurements, Measurement{Check: m.Check, Phase: string(m.Phase), Value: m.Value, Message: m.Message,
			Query: m.Query, Time: m.Time.UTC().Format("2006-01-02T15:04:05Z")})
	}
	return v
}

// approvalOf reads the rule and approvals the operator recorded, or the
// change's own rule before the operator has seen it.
func approvalOf(cr *sluicev1.ChangeRequest) Approval {
	rule := cr.Spec.Rule
	a := Approval{Digest: string(cr.Spec.ApprovalDigest), Phase: string(cr.Status.Phase)}
	if cr.Status.EffectiveRule != nil {
		rule = *cr.Status.EffectiveRule
		a.Effective = true
	}
	a.Required, a.AllowAuthor, a.NoApprovers, a.AutoApproveRisk = rule.Required, rule.AllowAuthor, rule.NoApprovers, string(rule.AutoApproveRisk)
	a.Approvers = identities(rule.Approvers)
	for _, l := range rule.AllOf {
		a.AllOf = append(a.AllOf, identities(l))
	}
	a.ApprovedBy = identities(cr.Status.ApprovedBy)
	a.RejectedBy = identities(cr.Status.RejectedBy)
	switch p := cr.Status.Phase; {
	case p == sluicev1.PhaseApproved, p == sluicev1.PhaseApplying, p.WasApplied():
		// The gate passed (auto-approval included): nobody is needed.
	default:
		if n := rule.Required - int32(len(a.ApprovedBy)); n > 0 {
			a.Needed = n
		}
	}
	return a
}

func identities(ids []sluicev1.Identity) []string {
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, string(id))
	}
	return out
}

// oneLine folds whitespace runs (newlines included) into single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
