// Package changespec holds the small conversions shared by the branch sync
// (internal/controller) and pull-request previews (internal/preview) when
// they turn a service manifest and a validation result into Release and
// ChangeRequest fields, so both build changes exactly alike.
package changespec

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// MaxFindings is the most findings a ChangeRequest records (the API's limit).
const MaxFindings = 500

// RuleOf converts a manifest environment's approval block to the API rule.
func RuleOf(a manifest.Approval) sluicev1.ApprovalRule {
	rule := sluicev1.ApprovalRule{Required: int32(a.Required), AllowAuthor: a.AllowAuthor, AutoApproveRisk: sluicev1.AutoApproveRisk(a.AutoApproveRisk),
		Rollback: sluicev1.RollbackMode(a.Rollback)}
	for _, id := range a.Approvers {
		rule.Approvers = append(rule.Approvers, sluicev1.Identity(id))
	}
	return rule
}

// TargetAllowed reports whether ns matches one of the Repository's
// targetNamespaces globs.
func TargetAllowed(repo *sluicev1.Repository, ns string) bool {
	for _, pattern := range repo.Spec.TargetNamespaces {
		if ok, err := path.Match(pattern, ns); err == nil && ok {
			return true
		}
	}
	return false
}

// EmailIdentities turns commit emails into "email:" identities, dropping
// duplicates and any the API's Identity pattern would refuse.
func EmailIdentities(emails []string) []sluicev1.Identity {
	var out []sluicev1.Identity
	seen := map[string]bool{}
	for _, e := range emails {
		e = strings.TrimSpace(e)
		if e == "" || strings.ContainsAny(e, " \t\r\n") || strings.HasPrefix(e, ":") || len(e) > 300 || seen[e] {
			continue
		}
		seen[e] = true
		out = append(out, sluicev1.Identity("email:"+e))
	}
	return out
}

// CleanFindings redacts URL credentials, trims fields to the API's limits
// and keeps at most MaxFindings findings, counting the rest.
func CleanFindings(in []sluicev1.Finding, truncated int32) ([]sluicev1.Finding, int32) {
	out := make([]sluicev1.Finding, 0, min(len(in), MaxFindings))
	for _, f := range in {
		if len(out) == MaxFindings {
			truncated++
			continue
		}
		f.Message = text.Truncate(git.Redact(f.Message), 2000)
		if f.Message == "" {
			f.Message = "(no message)"
		}
		f.Source = text.Truncate(f.Source, 60)
		f.Policy = text.Truncate(f.Policy, 250)
		f.Resource = text.Truncate(git.Redact(f.Resource), 500)
		f.File = text.Truncate(f.File, 500)
		switch f.Severity {
		case sluicev1.SeverityDeny, sluicev1.SeverityWarn, sluicev1.SeverityUnverifiable, sluicev1.SeverityInfo:
		default:
			f.Severity = sluicev1.SeverityDeny // unknown severities never pass silently
		}
		out = append(out, f)
	}
	return out, truncated
}

// VerdictResult is the validator's result, made stricter by the findings.
func VerdictResult(current sluicev1.VerdictResult, findings []sluicev1.Finding) sluicev1.VerdictResult {
	res := sluicev1.VerdictPass
	for _, f := range findings {
		switch f.Severity {
		case sluicev1.SeverityDeny:
			return sluicev1.VerdictFail
		case sluicev1.SeverityWarn:
			res = sluicev1.VerdictWarn
		}
	}
	if current == sluicev1.VerdictFail || (current == sluicev1.VerdictWarn && res == sluicev1.VerdictPass) {
		return current
	}
	return res
}

// Folders are the service's own folder (svc.Dir), its chart folder and its
// Terraform folder, those it has: what a render of the service reads when
// its manifest lists no finer inputs.
func Folders(svc *manifest.Service) []string {
	out := []string{svc.Dir}
	for _, d := range []string{svc.ChartDir(), svc.TerraformDir()} {
		if d != "" {
			out = append(out, d)
		}
	}
	for _, e := range svc.Environments {
		if d := svc.ChartDirOf(e.Name); e.Chart != nil && d != "" && d != svc.ChartDir() {
			out = append(out, d)
		}
	}
	return out
}

// Workspace is a private scratch folder for validating one artifact: the
// artifact extracted into Current, and an empty Previous for rendering the
// release at an earlier revision.
type Workspace struct {
	Current, Previous string
	root              string
}

// NewWorkspace makes a scratch folder under dir and extracts the artifact
// into its Current folder, so what is validated is exactly what will be
// applied. Call Remove when done.
func NewWorkspace(dir, prefix string, tarGz []byte) (*Workspace, error) {
	root, err := os.MkdirTemp(dir, prefix)
	if err != nil {
		return nil, fmt.Errorf("create scratch folder: %w", err)
	}
	w := &Workspace{Current: filepath.Join(root, "current"), Previous: filepath.Join(root, "previous"), root: root}
	for _, d := range []string{w.Current, w.Previous} {
		if err := os.Mkdir(d, 0o700); err != nil {
			w.Remove()
			return nil, fmt.Errorf("create scratch folder: %w", err)
		}
	}
	if err := artifact.Extract(tarGz, w.Current); err != nil {
		w.Remove()
		return nil, fmt.Errorf("extract artifact: %w", err)
	}
	return w, nil
}

// Remove deletes the scratch folder.
func (w *Workspace) Remove() { _ = os.RemoveAll(w.root) }
