package terraform

import (
	"regexp"
	"strings"
)

// Terraform prints values it evaluated in many of its errors: a function
// argument it could not convert ("cannot convert \"…\" to number"), an
// object's keys ("Did you mean …?"), a variable validation's or a
// condition's own error_message, a provider's message, a decoding error
// of a file it read. Any of these carries, to whoever reads the finding,
// pieces of the Terraform state the run could read (sensitive values
// included, through nonsensitive()) or of a file the runner could read.
// Redacting by value cannot be complete (every file of the runner, every
// substring of every state value), so the rule is an allowlist: a
// diagnostic is shown only when terraform gives it before evaluating
// anything (the stack's syntax and references) or when it is the state
// back end's own failure; everything else is Withheld.

// staticSummaries are diagnostics terraform reports from the
// configuration's text alone: their detail names blocks, arguments and
// variables written in the stack, never a value.
var staticSummaries = map[string]bool{
	"Unsupported argument":                            true,
	"Unsupported block type":                          true,
	"Missing required argument":                       true,
	"Missing required block":                          true,
	"Unclosed configuration block":                    true,
	"Argument or block definition required":           true,
	"Invalid expression":                              true,
	"Invalid reference":                               true,
	"Invalid block definition":                        true,
	"Invalid character":                               true,
	"Invalid multi-line string":                       true,
	"Invalid resource type name":                      true,
	"Invalid resource name":                           true,
	"Invalid variable name":                           true,
	"Missing newline after argument":                  true,
	"Missing item separator":                          true,
	"Missing key/value separator":                     true,
	"Missing name for resource":                       true,
	"Unterminated template string":                    true,
	"Extra characters after interpolation expression": true,
	"Reference to undeclared resource":                true,
	"Reference to undeclared input variable":          true,
	"Reference to undeclared local value":             true,
	"Reference to undeclared module":                  true,
	"Reference to undeclared output value":            true,
	"Value for undeclared variable":                   true,
	"No value for required variable":                  true,
	"Duplicate local value definition":                true,
	"Duplicate variable declaration":                  true,
	"Duplicate output definition":                     true,
	"Duplicate module call":                           true,
	"Call to unknown function":                        true,
	"Module not installed":                            true,
	"Unreadable module directory":                     true,
	"Invalid validation expression":                   true,
	"Invalid variable validation condition":           true,
	"Variables not allowed":                           true,
	"Function calls not allowed":                      true,
}

// staticSummaryPrefixes are static summaries that name what they are
// about ("Duplicate resource \"terraform_data\" configuration").
var staticSummaryPrefixes = []string{"Duplicate resource ", "Duplicate provider configuration"}

// backendSummaryPrefixes are failures of the state back end Sluice
// configures (its own server) or of the network: they quote its URL and
// its answers, not the stack's values.
var backendSummaryPrefixes = []string{
	"Failed to get existing workspaces",
	"Error acquiring the state lock",
	"Error releasing the state lock",
	"Error loading state",
	"Failed to load state",
	"Failed to save state",
	"Failed to persist state",
	"Error refreshing state",
	"Failed to query available provider packages",
	"Backend initialization required",
	"Terraform encountered problems during initialisation",
}

// quoted is a double-quoted string in a detail.
var quoted = regexp.MustCompile(`"((?:[^"\\]|\\.)*)"`)

// identifierLike is what a static detail quotes: names of blocks,
// arguments and variables, and file:line ranges.
var identifierLike = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.:,\-]{0,63}$`)

// showable reports whether d may be shown to anyone: its summary is one
// terraform gives before evaluating anything, and everything its detail
// quotes is a name (a provider could send any text under a known
// summary), or it is a failure of the state back end.
func showable(d Diagnostic) bool {
	for _, p := range backendSummaryPrefixes {
		// A back end's failure points at no file; a data source's
		// (terraform_remote_state reading whatever the stack names)
		// does, and is judged as any other.
		if strings.HasPrefix(d.Summary, p) && d.File == "" {
			return true
		}
	}
	static := staticSummaries[d.Summary]
	for _, p := range staticSummaryPrefixes {
		static = static || strings.HasPrefix(d.Summary, p) && !strings.Contains(d.Summary[len(p):], ":")
	}
	if !static {
		return false
	}
	for _, m := range quoted.FindAllStringSubmatch(d.Detail, -1) {
		if !identifierLike.MatchString(m[1]) {
			return false
		}
	}
	return true
}

// shown is diags as anyone may see them: each diagnostic that is not
// showable becomes Withheld at the same file and line, so the pusher
// still learns where the plan failed.
func shown(diags []Diagnostic) []Diagnostic {
	if diags == nil {
		return nil
	}
	out := make([]Diagnostic, len(diags))
	for i, d := range diags {
		if showable(d) {
			d.Detail = hideValues(d.Detail)
			out[i] = d
			continue
		}
		out[i] = Diagnostic{Summary: Withheld, File: d.File, Line: d.Line}
	}
	return out
}

// DetailsText is the full text of the failure for approvers: the step
// and every diagnostic in full (credentials redacted), one a line. It
// must only be stored where approvers alone read it.
func (e *RunError) DetailsText() string {
	var b strings.Builder
	b.WriteString("terraform " + e.Step + " failed")
	if e.err != nil {
		b.WriteString(" (" + firstLine(e.err.Error()) + ")")
	}
	b.WriteString("\n")
	for _, d := range e.Details {
		b.WriteString(d.String() + "\n")
	}
	return b.String()
}
