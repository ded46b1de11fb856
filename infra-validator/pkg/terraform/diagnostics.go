package terraform

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sluice-gitops/sluice/kit/text"
)

// ErrorKind says who can fix a failed terraform run.
type ErrorKind string

const (
	// ErrorConfiguration: the stack itself is wrong (a syntax error, an
	// undeclared variable, an invalid reference or argument: what
	// `terraform validate` reports). Only a change to the repository fixes
	// it; running again gives the same error.
	ErrorConfiguration ErrorKind = "configuration"
	// ErrorBackend: the state backend, a provider's API or the network
	// failed, the run timed out, or the failure is not recognised. Running
	// again later may succeed.
	ErrorBackend ErrorKind = "backend"
)

// ErrConfiguration matches (errors.Is) every *RunError of kind
// ErrorConfiguration.
var ErrConfiguration = errors.New("terraform configuration error")

// MaxStderr bounds RunError.Stderr.
const MaxStderr = 8 << 10

// maxDiagnostics bounds RunError.Diagnostics.
const maxDiagnostics = 50

// Diagnostic is one error terraform reported.
type Diagnostic struct {
	// Summary is terraform's one-line title ("Unsupported argument").
	Summary string
	// Detail is the explanation below it, joined into one paragraph.
	Detail string
	// File and Line locate it when terraform says where; File is as
	// terraform prints it, relative to the stack folder.
	File string
	Line int
}

// String is "file:line: summary: detail", leaving out what is empty.
func (d Diagnostic) String() string {
	var b strings.Builder
	if d.File != "" {
		b.WriteString(d.File)
		if d.Line > 0 {
			b.WriteString(":" + strconv.Itoa(d.Line))
		}
		b.WriteString(": ")
	}
	b.WriteString(d.Summary)
	if d.Detail != "" {
		b.WriteString(": " + d.Detail)
	}
	return b.String()
}

// RunError is a terraform step (init, workspace, plan, show) that failed,
// with terraform's diagnostics. Stderr and every diagnostic are redacted of
// credentials (values of ExecOptions.Env and anything shaped like a
// password, token or key) and bounded in size.
//
// Diagnostics is what anyone may see (findings, the pull request, logs,
// Error): a diagnostic whose text may quote a value terraform evaluated
// (state, a file it read, a data source) is replaced there by one saying
// Withheld, at the same file and line. Details and Stderr hold the full
// text, for approvers only: never put them in a finding, a status, an
// event or a log.
type RunError struct {
	// Step is the terraform command that failed.
	Step string
	// Kind says whether a change to the stack (ErrorConfiguration) or a
	// retry (ErrorBackend) is what it takes.
	Kind ErrorKind
	// Diagnostics are the errors terraform printed, in order, as they may
	// be shown (see Withheld).
	Diagnostics []Diagnostic
	// Details are the same diagnostics in full (credentials redacted):
	// for approvers only.
	Details []Diagnostic
	// Stderr is terraform's error output, at most MaxStderr bytes: for
	// approvers only, like Details.
	Stderr string
	err    error
}

// Withheld is the summary shown in place of a diagnostic whose text may
// quote values the run read; the diagnostic itself is in
// RunError.Details.
const Withheld = "plan failed (details for approvers)"

// HasWithheld reports whether some diagnostic is shown as Withheld.
func (e *RunError) HasWithheld() bool {
	for _, d := range e.Diagnostics {
		if d.Summary == Withheld {
			return true
		}
	}
	return false
}

// Error names the step, the kind and the diagnostics (about 1 KiB at most).
func (e *RunError) Error() string {
	var b strings.Builder
	b.WriteString("terraform " + e.Step)
	if e.Kind == ErrorConfiguration {
		b.WriteString(": configuration error")
	}
	switch {
	case len(e.Diagnostics) > 0:
		for i, d := range e.Diagnostics {
			sep := "; "
			if i == 0 {
				sep = ": "
			}
			if b.Len() > 900 {
				fmt.Fprintf(&b, " (and %d more)", len(e.Diagnostics)-i)
				break
			}
			b.WriteString(sep + d.String())
		}
	case e.err != nil:
		b.WriteString(": " + firstLine(e.err.Error()))
	}
	return text.Truncate(b.String(), 1024)
}

// Unwrap returns the underlying failure (exit status, or the deadline).
func (e *RunError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrConfiguration) true for configuration errors.
func (e *RunError) Is(target error) bool {
	return target == ErrConfiguration && e.Kind == ErrorConfiguration
}

// IsConfigurationError reports whether err holds a *RunError of kind
// ErrorConfiguration.
func IsConfigurationError(err error) bool { return errors.Is(err, ErrConfiguration) }

// NewRunError rebuilds a *RunError from its parts (as a runner sends them
// back), redacting secrets again and dropping values as ParseDiagnostics
// does; message stands in for the underlying failure.
func NewRunError(step string, kind ErrorKind, diags []Diagnostic, stderr, message string, secrets []string) *RunError {
	if kind != ErrorConfiguration {
		kind = ErrorBackend
	}
	if len(diags) > maxDiagnostics {
		diags = diags[:maxDiagnostics]
	}
	// The runner's diagnostics are read as untrusted, full text: which of
	// them may be shown is decided here again.
	full := make([]Diagnostic, 0, len(diags))
	for _, d := range diags {
		full = append(full, Diagnostic{
			Summary: text.Truncate(redact(d.Summary, secrets), 500),
			Detail:  text.Truncate(redact(d.Detail, secrets), 2000),
			File:    text.Truncate(redact(d.File, secrets), 500),
			Line:    max(0, min(d.Line, 1<<24)),
		})
	}
	e := &RunError{Step: text.Truncate(step, 40), Kind: kind, Diagnostics: shown(full), Details: full, Stderr: text.Truncate(hideValues(scrubSnippets(redact(stderr, secrets))), MaxStderr)}
	if message != "" {
		e.err = errors.New(text.Truncate(firstLine(redact(message, secrets)), 500))
	}
	return e
}

// stepError builds the *RunError of a failed step from its error and
// stderr; secrets are redacted wherever they appear.
func stepError(ctx context.Context, step string, timeout time.Duration, err error, stderr string, secrets []string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return &RunError{Step: step, Kind: ErrorBackend, err: fmt.Errorf("timed out after %s: %w", timeout, context.DeadlineExceeded)}
	}
	stderr = redact(stderr, secrets)
	diags := parseDiagnostics(stderr)
	kind := classifyFailure(diags)
	return &RunError{Step: step, Kind: kind, Diagnostics: shown(diags), Details: diags,
		Stderr: text.Truncate(hideValues(scrubSnippets(stderr)), MaxStderr), err: exitOnly(err)}
}

// exitOnly keeps the first line of terraform-exec's error ("exit status
// 1"): the rest is stderr again, unredacted.
func exitOnly(err error) error {
	if err == nil {
		return errors.New("failed")
	}
	msg := err.Error()
	if i := strings.IndexByte(msg, '\n'); i >= 0 {
		return errors.New(msg[:i])
	}
	return err
}

var (
	// transient marks failures of the world rather than the stack.
	transient = regexp.MustCompile(`(?i)connection refused|connection reset|i/o timeout|timed? ?out|timeout|no such host|network is unreachable|no route to host|tls handshake|x509:|certificate|dial tcp|eof\b|context deadline|temporar|try again|too many requests|service unavailable|internal server error|bad gateway|error acquiring the state lock|failed to (get existing workspaces|load state|read state|persist state|save state|lock state|unlock state)|unauthori[sz]ed|forbidden|failed to query available provider packages|could not retrieve the list of available versions|error loading state|backend initiali[sz]ation required|state lock`)
	// configSummary are summaries terraform gives only for a wrong stack.
	configSummary = regexp.MustCompile(`(?i)^(unsupported (argument|block type|attribute|operator)|missing (required argument|newline after argument|item separator|key/value separator|name for|required variable|closing)|invalid |unclosed |argument or block definition required|value for undeclared variable|reference to undeclared|undeclared |no value for required variable|duplicate |unknown variable|unterminated|unexpected|extraneous|variables? not allowed|function calls not allowed|call to unknown function|unsupported|incorrect |inconsistent|module not (installed|found)|unreadable module directory|failed to read (file|module directory)|error in function call|missing resource|cycle:|self-referential)`)
)

// classifyFailure says who can fix the failure: configuration when every
// diagnostic is about the stack (it points into a file, or has a summary
// only a wrong stack gets and no sign of a network or back-end failure);
// otherwise backend, so an unrecognised failure keeps being retried.
func classifyFailure(diags []Diagnostic) ErrorKind {
	if len(diags) == 0 {
		return ErrorBackend
	}
	for _, d := range diags {
		if d.File != "" {
			continue
		}
		if !configSummary.MatchString(d.Summary) || transient.MatchString(d.Summary+" "+d.Detail) {
			return ErrorBackend
		}
	}
	return ErrorConfiguration
}

// Terraform's headers of an init that failed on the configuration; the
// real diagnostics follow.
var initPreamble = "Terraform encountered problems during initialisation"

var locationLine = regexp.MustCompile(`^\s*on (.+?) line (\d+)(?:,|:)`)

// ParseDiagnostics reads the errors out of terraform's human-readable
// error output (-no-color, with or without the box-drawing margin):
// "Error: <summary>", an optional "on <file> line <n>" with a source
// snippet, and the detail paragraphs. Warnings and the preamble of a
// failed init are skipped. It never fails; unrecognised text gives no
// diagnostics.
func ParseDiagnostics(stderr string) []Diagnostic {
	out := parseDiagnostics(stderr)
	for i := range out {
		out[i].Detail = hideValues(out[i].Detail)
	}
	return out
}

// parseDiagnostics is ParseDiagnostics keeping the details whole, quoted
// values included (for RunError.Details).
func parseDiagnostics(stderr string) []Diagnostic {
	var out []Diagnostic
	var cur *Diagnostic
	var detail []string
	inError, inSnippet := false, false
	flush := func() {
		if cur != nil {
			cur.Detail = text.Truncate(strings.Join(detail, " "), 2000)
			if !strings.HasPrefix(cur.Summary, initPreamble) && len(out) < maxDiagnostics {
				out = append(out, *cur)
			}
		}
		cur, detail, inError, inSnippet = nil, nil, false, false
	}
	for _, raw := range strings.Split(strings.ReplaceAll(stderr, "\r\n", "\n"), "\n") {
		line := stripMargin(raw)
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "Error: "):
			flush()
			cur = &Diagnostic{Summary: text.Truncate(strings.TrimSpace(strings.TrimPrefix(trimmed, "Error: ")), 500)}
			inError = true
			continue
		case strings.HasPrefix(trimmed, "Warning: "):
			flush()
			continue
		}
		if !inError {
			continue
		}
		if m := locationLine.FindStringSubmatch(line); m != nil && cur.File == "" && len(detail) == 0 {
			cur.File = text.Truncate(m[1], 500)
			cur.Line, _ = strconv.Atoi(m[2])
			if cur.Line < 0 || cur.Line > 1<<24 {
				cur.Line = 0
			}
			inSnippet = true
			continue
		}
		if trimmed == "" {
			if cur.File == "" && len(detail) == 0 && strings.HasPrefix(cur.Summary, initPreamble) {
				continue
			}
			inSnippet = false
			continue
		}
		if inSnippet {
			continue // the source snippet and its ├──── annotations
		}
		if len(detail) == 0 && cur.File == "" && !strings.HasSuffix(cur.Summary, ".") && startsLower(trimmed) {
			// A summary wrapped onto the next line.
			cur.Summary = text.Truncate(cur.Summary+" "+trimmed, 500)
			continue
		}
		detail = append(detail, trimmed)
	}
	flush()
	return out
}

// quotedValue is a double-quoted string in a diagnostic's detail.
var quotedValue = regexp.MustCompile(`"((?:[^"\s\\]|\\.){16,})"`)

// hideValues replaces long quoted strings in a diagnostic's detail with
// "(value hidden)": terraform quotes the values it evaluated there ("cannot
// convert \"…\" to number"), and those may be anything it read.
// Names of variables, arguments and resources are short and stay; so does
// text with spaces (between two quoted names, say).
func hideValues(detail string) string {
	return quotedValue.ReplaceAllString(detail, `"(value hidden)"`)
}

// scrubSnippets drops the source snippet terraform prints under "on FILE
// line N" (the lines up to the next blank line), whose "│ x is …" lines
// show the values of the expression: they may be anything terraform read.
func scrubSnippets(stderr string) string {
	lines := strings.Split(stderr, "\n")
	out := lines[:0]
	inSnippet := false
	for _, raw := range lines {
		line := stripMargin(raw)
		switch {
		case locationLine.MatchString(line):
			inSnippet = true
			out = append(out, raw)
			continue
		case strings.TrimSpace(line) == "":
			inSnippet = false
		case inSnippet:
			continue
		}
		out = append(out, raw)
	}
	return strings.Join(out, "\n")
}

func startsLower(s string) bool {
	r, _ := utf8.DecodeRuneInString(s)
	return r >= 'a' && r <= 'z'
}

// stripMargin removes terraform's box-drawing margin ("│ ", "╷", "╵").
func stripMargin(line string) string {
	for _, p := range []string{"│ ", "│", "╷", "╵"} {
		if strings.HasPrefix(line, p) {
			return strings.TrimPrefix(line, p)
		}
	}
	return line
}

const redacted = "[REDACTED]"

var (
	// secretAssignment is a secret-named key followed by its value.
	secretAssignment = regexp.MustCompile(`(?i)((?:password|passwd|pwd|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|client[_-]?secret|credentials?|authorization)["']?\s*[:=]\s*["']?)([^\s"',;]+)`)
	// bearer is an HTTP authorization header value.
	bearer = regexp.MustCompile(`(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}`)
	// urlUserinfo is the user:password@ of a URL.
	urlUserinfo = regexp.MustCompile(`([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@`)
	// shapedLikeSecret are tokens and keys recognisable by their form.
	shapedLikeSecret = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)|(AKIA|ASIA)[A-Z0-9]{16}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*`)
)

// minSecretLen keeps short environment values ("1", "true") from being
// blanked out of every message.
const minSecretLen = 6

// redact replaces the given secret values (longest first) and anything
// shaped like a credential with [REDACTED].
func redact(s string, secrets []string) string {
	list := make([]string, 0, len(secrets))
	for _, v := range secrets {
		if len(v) >= minSecretLen {
			list = append(list, v)
		}
	}
	sort.Slice(list, func(i, j int) bool { return len(list[i]) > len(list[j]) })
	for _, v := range list {
		s = strings.ReplaceAll(s, v, redacted)
	}
	s = shapedLikeSecret.ReplaceAllString(s, redacted)
	s = urlUserinfo.ReplaceAllString(s, "${1}"+redacted+"@")
	s = bearer.ReplaceAllString(s, "${1} "+redacted)
	s = secretAssignment.ReplaceAllString(s, "${1}"+redacted)
	return s
}

// secrets are the values of the child's extra environment (credentials
// often, and never worth quoting) and ExecOptions.Secrets.
func (o ExecOptions) secrets() []string {
	out := make([]string, 0, len(o.Env)+len(o.Secrets))
	for _, v := range o.Env {
		out = append(out, v)
	}
	return append(out, o.Secrets...)
}

// Redact replaces every value in secrets (of at least 6 bytes) and
// anything shaped like a credential (tokens, keys, URL passwords,
// "password=…") in s with [REDACTED].
func Redact(s string, secrets []string) string { return redact(s, secrets) }

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
