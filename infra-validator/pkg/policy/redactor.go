package policy

import (
	"regexp"
	"sort"
	"strings"
)

// Redactor applies to any text the redaction Redact applies to findings:
// every secret string of its inputs (Kubernetes Secret data, values
// Terraform marks sensitive, values under secret-named keys, values shaped
// like keys or tokens) is replaced by [REDACTED], and so is anything else
// shaped like a credential (a private key header, a cloud or forge token, a
// URL with a password), wherever it appears. Reports shown outside the
// cluster (pull-request comments, `kubectl sluice diff`) pass through it.
type Redactor struct {
	secrets []string
}

// NewRedactor collects the secrets of inputs (decoded JSON or YAML values,
// or ast.Values) once; extra are further values to hide (credentials the
// run was given).
func NewRedactor(extra []string, inputs ...any) *Redactor {
	c := newCollector()
	for _, in := range inputs {
		c.collect(in, "", false)
	}
	for _, s := range extra {
		if len(s) >= minSecretLen {
			addSecret(s, c.set)
		}
	}
	r := &Redactor{}
	if len(c.set) > 0 {
		for s := range c.set {
			r.secrets = append(r.secrets, s)
		}
		// Longest first, so a secret is replaced whole before any of its
		// lines.
		sort.Slice(r.secrets, func(i, j int) bool {
			if len(r.secrets[i]) != len(r.secrets[j]) {
				return len(r.secrets[i]) > len(r.secrets[j])
			}
			return r.secrets[i] < r.secrets[j]
		})
	}
	return r
}

// String returns s with every known secret and every credential-shaped
// value replaced by [REDACTED].
func (r *Redactor) String(s string) string {
	if r != nil {
		s = redactString(s, r.secrets)
	}
	if maybeSecretValue(s) {
		s = credentialShaped.ReplaceAllStringFunc(s, func(m string) string {
			// Keep the scheme of a URL so the reader sees what it was.
			if i := strings.Index(m, "://"); i > 0 {
				return m[:i+3] + Redacted + "@"
			}
			return Redacted
		})
	}
	return s
}

// credentialShaped matches whole credentials of the shapes secretValue
// detects, so they can be cut out of free text.
var credentialShaped = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY-----(?s:.*?)(-----END [A-Z ]*PRIVATE KEY-----|\z)|(AKIA|ASIA|A3T[A-Z0-9])[A-Z0-9]{16}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*|[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@`)
