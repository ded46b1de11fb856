package policy

import (
	"regexp"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// Redacted replaces a secret value in a finding.
const Redacted = "[REDACTED]"

// minSecretLen keeps short, common strings ("true", "prod") from being
// treated as secrets and blanked out of every message.
const minSecretLen = 6

var (
	// secretKeyName matches keys that name a secret; it mirrors the default
	// policy sluice.kubernetes.secrets.
	secretKeyName = regexp.MustCompile(`(?i)(^|[_.-])(password|passwd|pwd|secret|secret[_-]?key|token|api[_-]?key|access[_-]?key|private[_-]?key|client[_-]?secret|credentials?)$`)
	// secretValue matches values that look like credentials wherever they are.
	secretValue = regexp.MustCompile(`-----BEGIN [A-Z ]*PRIVATE KEY|(AKIA|ASIA|A3T[A-Z0-9])[A-Z0-9]{16}|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,}|AIza[0-9A-Za-z_-]{35}|eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.|"private_key_id"\s*:|[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s@]+@`)
)

// Redact is defence in depth behind the policies' own rule of never quoting
// a value: every string of the inputs that is, or sits under a key that
// names, a secret (Kubernetes Secret data, values Terraform marks sensitive,
// secret-named keys, values shaped like keys or tokens) is replaced by
// [REDACTED] wherever it appears in a finding's message or resource. The
// inputs are only walked when there are findings.
func Redact(findings []report.Finding, inputs ...any) []report.Finding {
	if len(findings) == 0 {
		return findings
	}
	return redactWith(findings, secretsOf(inputs...))
}

// secretsOf gathers the secret strings of the inputs, longest first, so a
// secret is replaced whole before any of its lines.
func secretsOf(inputs ...any) []string {
	c := newCollector()
	for _, in := range inputs {
		c.collect(in, "", false)
	}
	if len(c.set) == 0 {
		return nil
	}
	secrets := make([]string, 0, len(c.set))
	for s := range c.set {
		secrets = append(secrets, s)
	}
	sort.Slice(secrets, func(i, j int) bool {
		if len(secrets[i]) != len(secrets[j]) {
			return len(secrets[i]) > len(secrets[j])
		}
		return secrets[i] < secrets[j]
	})
	return secrets
}

// redactWith replaces the secrets (from secretsOf) in the findings.
func redactWith(findings []report.Finding, secrets []string) []report.Finding {
	if len(secrets) == 0 {
		return findings
	}
	for i := range findings {
		findings[i].Message = redactString(findings[i].Message, secrets)
		findings[i].Resource = redactString(findings[i].Resource, secrets)
	}
	return findings
}

func redactString(s string, secrets []string) string {
	if len(s) < minSecretLen {
		return s
	}
	for _, sec := range secrets {
		if strings.Contains(s, sec) {
			s = strings.ReplaceAll(s, sec, Redacted)
		}
	}
	return s
}

// valueMarkers are substrings every secretValue match contains; checking them
// first keeps the regular expression off the bulk of a large input.
var valueMarkers = []string{"-----BEGIN", "AKIA", "ASIA", "A3T", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "AIza", "eyJ", "://", "private_key_id"}

func maybeSecretValue(s string) bool {
	for _, m := range valueMarkers {
		if strings.Contains(s, m) {
			return true
		}
	}
	return false
}

// collector gathers secret strings; secretKey memoises the key-name test,
// since a large input repeats a few keys many times, and secretValue the
// value test of short values.
type collector struct {
	set         map[string]bool
	secretKey   map[string]bool
	secretValue map[string]bool
}

func newCollector() *collector {
	return &collector{set: map[string]bool{}, secretKey: map[string]bool{}, secretValue: map[string]bool{}}
}

func (c *collector) isSecretKey(key string) bool {
	v, ok := c.secretKey[key]
	if !ok {
		v = secretKeyName.MatchString(key)
		c.secretKey[key] = v
	}
	return v
}

// collect walks v; key is the map key v sits under, secret says an enclosing
// structure marks everything below as secret.
func (c *collector) collect(v any, key string, secret bool) {
	switch t := v.(type) {
	case ast.Value:
		c.collectAST(t, key, secret)
	case map[string]any:
		kind, _ := t["kind"].(string)
		for k, child := range t {
			childSecret := secret || (kind == "Secret" && (k == "data" || k == "stringData"))
			c.collect(child, k, childSecret)
		}
		// Terraform marks sensitive values in parallel structures.
		for _, pair := range [][2]string{{"after", "after_sensitive"}, {"before", "before_sensitive"}} {
			if marks, ok := t[pair[1]]; ok {
				c.sensitive(t[pair[0]], marks)
			}
		}
	case []any:
		for _, child := range t {
			c.collect(child, key, secret)
		}
	case string:
		c.collectString(t, key, secret)
	}
}

func (c *collector) collectString(s, key string, secret bool) {
	if len(s) < minSecretLen {
		return
	}
	if secret || c.isSecretKey(key) || c.isSecretValue(s) {
		addSecret(s, c.set)
	}
}

// isSecretValue tests a value against secretValue, memoising short values,
// which a large input repeats many times (actions, types, tag values).
func (c *collector) isSecretValue(s string) bool {
	if len(s) > maxInternLen {
		return maybeSecretValue(s) && secretValue.MatchString(s)
	}
	v, ok := c.secretValue[s]
	if !ok {
		v = maybeSecretValue(s) && secretValue.MatchString(s)
		c.secretValue[s] = v
	}
	return v
}

// Keys collectAST looks up, made once.
var (
	// sensitivePair pairs each value with its marks; collectAST finds the
	// marks in this order.
	sensitivePair = [2][2]*ast.Term{
		{ast.StringTerm("after"), ast.StringTerm("after_sensitive")},
		{ast.StringTerm("before"), ast.StringTerm("before_sensitive")},
	}
)

// sensitive adds the strings of v where Terraform's sensitivity marks (true,
// or a structure of marks) say they are sensitive.
func (c *collector) sensitive(v, marks any) {
	switch m := marks.(type) {
	case bool:
		if m {
			c.collect(v, "", true)
		}
	case map[string]any:
		vm, _ := v.(map[string]any)
		for k, mk := range m {
			c.sensitive(vm[k], mk)
		}
	case []any:
		va, _ := v.([]any)
		for i, mk := range m {
			if i < len(va) {
				c.sensitive(va[i], mk)
			}
		}
	}
}

// addSecret records a secret, and each of its lines, so a policy that quotes
// one line of a multi-line key is still caught.
func addSecret(s string, set map[string]bool) {
	set[s] = true
	if strings.Contains(s, "\n") {
		for _, line := range strings.Split(s, "\n") {
			line = strings.TrimSpace(line)
			if len(line) >= 8 && !strings.HasPrefix(line, "-----") {
				set[line] = true
			}
		}
	}
}

// collectAST is collect for an input given as an ast.Value (ParseJSON).
func (c *collector) collectAST(v ast.Value, key string, secret bool) {
	switch t := v.(type) {
	case ast.Object:
		// One pass over the keys finds kind and the sensitivity marks,
		// cheaper than looking each up by hash in every object of a plan.
		var kind string
		var marks [2]*ast.Term
		t.Foreach(func(k, child *ast.Term) {
			switch ks, _ := k.Value.(ast.String); ks {
			case "kind":
				if s, ok := child.Value.(ast.String); ok {
					kind = string(s)
				}
			case "after_sensitive":
				marks[0] = child
			case "before_sensitive":
				marks[1] = child
			}
		})
		t.Foreach(func(k, child *ast.Term) {
			ks, _ := k.Value.(ast.String)
			childSecret := secret || (kind == "Secret" && (ks == "data" || ks == "stringData"))
			c.collectAST(child.Value, string(ks), childSecret)
		})
		for i, pair := range sensitivePair {
			if marks[i] != nil {
				c.sensitiveAST(termValue(t.Get(pair[0])), marks[i].Value)
			}
		}
	case *ast.Array:
		t.Foreach(func(child *ast.Term) { c.collectAST(child.Value, key, secret) })
	case ast.String:
		c.collectString(string(t), key, secret)
	}
}

// sensitiveAST is sensitive for ast.Values.
func (c *collector) sensitiveAST(v, marks ast.Value) {
	switch m := marks.(type) {
	case ast.Boolean:
		if m && v != nil {
			c.collectAST(v, "", true)
		}
	case ast.Object:
		vm, _ := v.(ast.Object)
		m.Foreach(func(k, mk *ast.Term) {
			var child ast.Value
			if vm != nil {
				child = termValue(vm.Get(k))
			}
			c.sensitiveAST(child, mk.Value)
		})
	case *ast.Array:
		va, _ := v.(*ast.Array)
		for i := 0; i < m.Len(); i++ {
			var child ast.Value
			if va != nil && i < va.Len() {
				child = va.Elem(i).Value
			}
			c.sensitiveAST(child, m.Elem(i).Value)
		}
	}
}

func termValue(t *ast.Term) ast.Value {
	if t == nil {
		return nil
	}
	return t.Value
}
