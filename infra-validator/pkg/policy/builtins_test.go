package policy

import (
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
)

// parse_config parses text a policy gives it: any text gives a value the
// policy can use or an error, never a panic.
func FuzzParseConfigText(f *testing.F) {
	f.Add("yaml", "a: 1\n---\nb: [x]\n")
	f.Add("json", `{"a": [1, 2.5, null]}`)
	f.Add("yaml", "--- \n---\n")
	f.Add("hcl2", "resource {}")
	f.Fuzz(func(t *testing.T, parser, text string) {
		v, err := parseConfigText(parser, []byte(text))
		if err != nil {
			return
		}
		if _, err := ast.InterfaceToValue(v); err != nil {
			t.Fatalf("%s %q gave a value rego cannot hold: %v", parser, text, err)
		}
	})
}
