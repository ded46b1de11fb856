package report

// Result summarises findings; the values match the Sluice API's VerdictResult.
type Result string

const (
	// ResultPass: no deny, warn or unverifiable finding.
	ResultPass Result = "pass"
	// ResultWarn: warnings or unverifiable checks, no deny finding.
	ResultWarn Result = "warn"
	// ResultFail: at least one deny finding.
	ResultFail Result = "fail"
)

// Verdict is the validator's decision on one change: the summary result, the
// risk level and the findings (sorted, secret values redacted).
type Verdict struct {
	Result   Result    `json:"result"`
	Risk     Risk      `json:"risk"`
	Findings []Finding `json:"findings"`
}

// NewVerdict sorts findings and derives the result: fail on any deny, warn on
// any warn or unverifiable finding, pass otherwise. An empty risk is low.
func NewVerdict(risk Risk, findings []Finding) Verdict {
	if risk == "" {
		risk = RiskLow
	}
	fs := append([]Finding(nil), findings...)
	SortFindings(fs)
	if fs == nil {
		fs = []Finding{}
	}
	return Verdict{Result: resultOf(fs), Risk: risk, Findings: fs}
}

func resultOf(fs []Finding) Result {
	out := ResultPass
	for _, f := range fs {
		switch f.Severity {
		case SeverityDeny:
			return ResultFail
		case SeverityWarn, SeverityUnverifiable:
			out = ResultWarn
		}
	}
	return out
}

// Counts are the number of findings per severity.
type Counts struct {
	Deny         int `json:"deny"`
	Unverifiable int `json:"unverifiable"`
	Warn         int `json:"warn"`
	Info         int `json:"info"`
}

// Count counts findings per severity.
func Count(fs []Finding) Counts {
	var c Counts
	for _, f := range fs {
		switch f.Severity {
		case SeverityDeny:
			c.Deny++
		case SeverityUnverifiable:
			c.Unverifiable++
		case SeverityWarn:
			c.Warn++
		default:
			c.Info++
		}
	}
	return c
}

// FailOn is the lowest severity that makes a run fail (the CLI's --fail-on).
type FailOn string

const (
	// FailOnDeny fails only on deny findings (the default).
	FailOnDeny FailOn = "deny"
	// FailOnWarn also fails on warn and unverifiable findings.
	FailOnWarn FailOn = "warn"
)

// Fails says whether the findings fail a run at the given threshold.
func (f FailOn) Fails(fs []Finding) bool {
	c := Count(fs)
	if c.Deny > 0 {
		return true
	}
	return f == FailOnWarn && c.Warn+c.Unverifiable > 0
}
