package report

import "sort"

// severityRank orders severities from most to least blocking.
func severityRank(s Severity) int {
	switch s {
	case SeverityDeny:
		return 0
	case SeverityUnverifiable:
		return 1
	case SeverityWarn:
		return 2
	}
	return 3
}

// SortFindings orders findings by resource, severity (deny first), policy and
// message, so reports are deterministic.
func SortFindings(fs []Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Resource != b.Resource {
			return a.Resource < b.Resource
		}
		if ra, rb := severityRank(a.Severity), severityRank(b.Severity); ra != rb {
			return ra < rb
		}
		if a.Policy != b.Policy {
			return a.Policy < b.Policy
		}
		return a.Message < b.Message
	})
}
