package helmcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
	"helm.sh/helm/v3/pkg/chart"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// validateSchema checks values against the chart's values.schema.json and
// each enabled subchart's against its own, as Helm does, but without
// fetching any referenced document (no file or network access: a chart's
// schema could otherwise make the validator read local files or call out).
// Every violation is a deny finding naming the value's path; the messages
// never repeat a value, which could be a secret.
func (c *checker) validateSchema(ch *chart.Chart, values map[string]any, prefix string) {
	if ch.Schema != nil {
		file := c.chartFile(path.Join(prefix, "values.schema.json"))
		for _, msg := range schemaViolations(ch.Schema, values) {
			c.add(report.SeverityDeny, "helm.values_schema", "", file, 0, msg)
		}
	}
	for _, sub := range ch.Dependencies() {
		raw, ok := values[sub.Name()]
		if !ok || raw == nil {
			continue
		}
		subValues, ok := raw.(map[string]any)
		if !ok {
			c.add(report.SeverityDeny, "helm.values_schema", "", c.chartFile(path.Join(prefix, "values.yaml")), 0,
				fmt.Sprintf("values for subchart %s must be a map", sub.Name()))
			continue
		}
		c.validateSchema(sub, subValues, path.Join(prefix, "charts", sub.Name()))
	}
}

func schemaViolations(schemaJSON []byte, values map[string]any) (msgs []string) {
	defer func() {
		if p := recover(); p != nil {
			msgs = []string{fmt.Sprintf("values.schema.json cannot be used: %v", p)}
		}
	}()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(schemaJSON))
	if err != nil {
		return []string{"values.schema.json is not valid JSON: " + err.Error()}
	}
	compiler := jsonschema.NewCompiler()
	compiler.UseLoader(jsonschema.SchemeURLLoader{}) // no external references
	if err := compiler.AddResource("file:///values.schema.json", doc); err != nil {
		return []string{"values.schema.json is not a valid schema: " + err.Error()}
	}
	sch, err := compiler.Compile("file:///values.schema.json")
	if err != nil {
		return []string{"values.schema.json is not a valid schema (external references are not followed): " + err.Error()}
	}
	// Validate a JSON round-trip of the values, as the schema library
	// expects JSON types.
	inst, err := jsonRoundTrip(values)
	if err != nil {
		return []string{"values cannot be checked: " + err.Error()}
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []string{"values cannot be checked: " + err.Error()}
	}
	seen := map[string]bool{}
	for _, leaf := range leaves(ve) {
		loc := "/" + strings.Join(leaf.InstanceLocation, "/")
		msg := fmt.Sprintf("values %s: %s", loc, safeMessage(leaf))
		if !seen[msg] {
			seen[msg] = true
			msgs = append(msgs, msg)
		}
	}
	sort.Strings(msgs)
	return msgs
}

var printer = message.NewPrinter(language.English)

// jsonRoundTrip converts values to plain JSON types (numbers as
// json.Number, which the schema library understands).
func jsonRoundTrip(v map[string]any) (any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return jsonschema.UnmarshalJSON(bytes.NewReader(data))
}

// leaves returns the innermost causes of a validation error.
func leaves(e *jsonschema.ValidationError) []*jsonschema.ValidationError {
	if len(e.Causes) == 0 {
		return []*jsonschema.ValidationError{e}
	}
	var out []*jsonschema.ValidationError
	for _, c := range e.Causes {
		out = append(out, leaves(c)...)
	}
	return out
}

// safeMessage describes a violation without echoing the offending value.
func safeMessage(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		return fmt.Sprintf("got %s, want %s", k.Got, strings.Join(k.Want, " or "))
	case *kind.Required:
		return fmt.Sprintf("missing required %s", strings.Join(k.Missing, ", "))
	case *kind.AdditionalProperties:
		return fmt.Sprintf("additional properties not allowed: %s", strings.Join(k.Properties, ", "))
	case *kind.Enum:
		return "value is not one of the allowed values"
	case *kind.Const:
		return "value is not the required constant"
	case *kind.Pattern:
		return fmt.Sprintf("value does not match the pattern %s", k.Want)
	case *kind.Format:
		return fmt.Sprintf("value is not a valid %s", k.Want)
	case *kind.Minimum:
		return fmt.Sprintf("value is less than the minimum %s", k.Want.RatString())
	case *kind.Maximum:
		return fmt.Sprintf("value is more than the maximum %s", k.Want.RatString())
	case *kind.ExclusiveMinimum:
		return fmt.Sprintf("value must be more than %s", k.Want.RatString())
	case *kind.ExclusiveMaximum:
		return fmt.Sprintf("value must be less than %s", k.Want.RatString())
	case *kind.MultipleOf:
		return fmt.Sprintf("value is not a multiple of %s", k.Want.RatString())
	case *kind.MinLength, *kind.MaxLength, *kind.MinItems, *kind.MaxItems,
		*kind.MinProperties, *kind.MaxProperties, *kind.UniqueItems:
		// Lengths and counts only, never the value itself.
		return e.ErrorKind.LocalizedString(printer)
	case *kind.FalseSchema:
		return "not allowed"
	}
	kw := e.ErrorKind.KeywordPath()
	if len(kw) > 0 {
		return fmt.Sprintf("value fails the schema's %q rule", kw[len(kw)-1])
	}
	return "value fails the schema"
}
