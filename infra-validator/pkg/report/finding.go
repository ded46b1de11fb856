// Package report holds the validator's findings and verdict types, shared by
// the Terraform, Helm and policy checks, and the report formats.
package report

// Severity of a finding. The values match the Sluice API's Severity.
type Severity string

const (
	// SeverityDeny blocks the change (conftest deny/violation).
	SeverityDeny Severity = "deny"
	// SeverityWarn is shown but does not block (conftest warn).
	SeverityWarn Severity = "warn"
	// SeverityUnverifiable: a check depends on a value unknown until apply.
	// It never passes silently and blocks auto-approval.
	SeverityUnverifiable Severity = "unverifiable"
	// SeverityInfo is informational.
	SeverityInfo Severity = "info"
)

// Risk is a change's risk level; the values match the Sluice API's Risk.
type Risk string

const (
	RiskLow    Risk = "low"
	RiskMedium Risk = "medium"
	RiskHigh   Risk = "high"
)

// rank orders risks; unknown values rank as high so they never pass as low.
func (r Risk) rank() int {
	switch r {
	case RiskLow:
		return 0
	case RiskMedium:
		return 1
	}
	return 2
}

// MaxRisk returns the higher of the risks; no risks is low.
func MaxRisk(risks ...Risk) Risk {
	out := RiskLow
	for _, r := range risks {
		if r.rank() > out.rank() {
			out = r
		}
	}
	return out
}

// Finding is one result of a check. Messages never carry secret values.
type Finding struct {
	Severity Severity `json:"severity"`
	// Source is what produced it: terraform, helm, policy or manifest.
	Source string `json:"source,omitempty"`
	// Policy is the rule or package that produced it.
	Policy string `json:"policy,omitempty"`
	// Resource is the Terraform address or Kubernetes object (Kind/namespace/name).
	Resource string `json:"resource,omitempty"`
	Message  string `json:"message"`
	// File and Line locate the finding in the repository where known.
	File string `json:"file,omitempty"`
	Line int    `json:"line,omitempty"`
}
