package terraform

import (
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// CodeKind is a kind of pushed code that terraform runs.
type CodeKind string

const (
	// CodeProvisioner is a provisioner (local-exec, remote-exec, file…)
	// of a resource the plan creates, replaces or destroys: it runs at
	// apply (create-time ones on creation, `when = destroy` ones on
	// destroy; the plan's JSON does not say which a block is, so both
	// count whenever the resource changes so).
	CodeProvisioner CodeKind = "provisioner"
	// CodeExternal is an `external` data source: it runs its program at
	// plan and again at apply.
	CodeExternal CodeKind = "external"
	// CodeProvider is a provider none of the applied state's resources
	// uses: its binary runs for the first time in this stack.
	CodeProvider CodeKind = "provider"
)

// Code is one piece of code a plan runs beyond resource changes.
type Code struct {
	Kind CodeKind `json:"kind"`
	// Address is the resource's configuration address (module path
	// without instance keys), or the provider's source address.
	Address string `json:"address"`
	// Type is the provisioner type (local-exec…), "external", or the
	// provider's local name.
	Type string `json:"type,omitempty"`
	// Runs says the plan runs it: a provisioner's resource is created,
	// replaced or destroyed; an external data source or a new provider
	// always runs.
	Runs bool `json:"runs"`
	// Text is what it runs as the configuration gives it: the command,
	// inline lines, program or file arguments, each "name = value";
	// a value built from expressions shows the references it uses.
	Text []string `json:"text,omitempty"`
}

// String is a one-line description for findings and reviews.
func (c Code) String() string {
	var head string
	switch c.Kind {
	case CodeProvisioner:
		head = fmt.Sprintf("provisioner %q of %s", c.Type, c.Address)
	case CodeExternal:
		head = "external data source " + c.Address
	case CodeProvider:
		head = "provider " + c.Address + " (new to this stack)"
	default:
		head = string(c.Kind) + " " + c.Address
	}
	if len(c.Text) == 0 {
		return head
	}
	return head + ": " + strings.Join(c.Text, "; ")
}

// builtinProvider is terraform's own provider (terraform_data): it is
// part of the terraform binary, never a new binary.
const builtinProvider = "terraform.io/builtin/terraform"

// ExecutedCode lists the provisioners, external data sources and
// providers new to the stack in plan (its configuration, and its prior
// state for the providers in use before), sorted by kind and address.
func ExecutedCode(plan *tfjson.Plan) []Code {
	if plan == nil || plan.Config == nil {
		return nil
	}
	changed := changedConfigAddresses(plan)
	var out []Code
	walkConfig(plan.Config.RootModule, "", func(prefix string, r *tfjson.ConfigResource) {
		addr := prefix + r.Address
		if r.Mode == tfjson.DataResourceMode && r.Type == "external" {
			out = append(out, Code{Kind: CodeExternal, Address: addr, Type: r.Type, Runs: true, Text: expressionTexts(r.Expressions, "program", "working_dir", "query")})
		}
		for _, p := range r.Provisioners {
			if p == nil {
				continue
			}
			out = append(out, Code{Kind: CodeProvisioner, Address: addr, Type: p.Type, Runs: changed[addr],
				Text: expressionTexts(p.Expressions, "command", "interpreter", "working_dir", "inline", "script", "scripts", "source", "content", "destination")})
		}
	})
	out = append(out, newProviders(plan)...)
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Kind != out[j].Kind {
			return out[i].Kind < out[j].Kind
		}
		return out[i].Address < out[j].Address
	})
	return out
}

// walkConfig calls f for every resource of m and its module calls, with
// the module path ("module.a.module.b.") as prefix.
func walkConfig(m *tfjson.ConfigModule, prefix string, f func(prefix string, r *tfjson.ConfigResource)) {
	if m == nil {
		return
	}
	for _, r := range m.Resources {
		if r != nil {
			f(prefix, r)
		}
	}
	names := make([]string, 0, len(m.ModuleCalls))
	for name := range m.ModuleCalls {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if mc := m.ModuleCalls[name]; mc != nil {
			walkConfig(mc.Module, prefix+"module."+name+".", f)
		}
	}
}

// instanceKey matches an instance key ([0], ["a"]) in an address.
var instanceKey = regexp.MustCompile(`\[[^\]]*\]`)

// changedConfigAddresses are the configuration addresses of the managed
// resources the plan creates, replaces or destroys: their provisioners run.
func changedConfigAddresses(plan *tfjson.Plan) map[string]bool {
	out := map[string]bool{}
	for _, rc := range plan.ResourceChanges {
		if rc == nil || rc.Change == nil || rc.Mode != tfjson.ManagedResourceMode {
			continue
		}
		switch classify(rc) {
		case ActionCreate, ActionReplace, ActionDelete, ActionUnknown:
			out[instanceKey.ReplaceAllString(rc.Address, "")] = true
		}
	}
	return out
}

// newProviders are the providers the configuration or the plan's changes
// use that no resource of the prior (applied) state uses.
func newProviders(plan *tfjson.Plan) []Code {
	before := map[string]bool{builtinProvider: true}
	if plan.PriorState != nil && plan.PriorState.Values != nil {
		walkState(plan.PriorState.Values.RootModule, func(r *tfjson.StateResource) { before[r.ProviderName] = true })
	}
	// A managed resource the plan updates, deletes or keeps is in the
	// state already, with its provider.
	for _, rc := range plan.ResourceChanges {
		if rc != nil && rc.Change != nil && rc.Mode == tfjson.ManagedResourceMode && !rc.Change.Actions.Create() {
			before[rc.ProviderName] = true
		}
	}
	now := map[string]string{} // source address → local name
	if plan.Config != nil {
		for _, pc := range plan.Config.ProviderConfigs {
			if pc != nil && pc.FullName != "" {
				now[pc.FullName] = pc.Name
			}
		}
	}
	for _, rc := range plan.ResourceChanges {
		if rc != nil && rc.ProviderName != "" {
			if _, ok := now[rc.ProviderName]; !ok {
				now[rc.ProviderName] = ""
			}
		}
	}
	var out []Code
	for full, name := range now {
		if !before[full] {
			out = append(out, Code{Kind: CodeProvider, Address: full, Type: name, Runs: true})
		}
	}
	return out
}

func walkState(m *tfjson.StateModule, f func(*tfjson.StateResource)) {
	if m == nil {
		return
	}
	for _, r := range m.Resources {
		if r != nil {
			f(r)
		}
	}
	for _, c := range m.ChildModules {
		walkState(c, f)
	}
}

// expressionTexts renders the named expressions that are set, in the
// order given: a constant as JSON (a string as itself), an expression
// built from others by its references.
func expressionTexts(exprs map[string]*tfjson.Expression, names ...string) []string {
	var out []string
	for _, n := range names {
		e := exprs[n]
		if e == nil || e.ExpressionData == nil {
			continue
		}
		switch {
		case e.ConstantValue != nil && e.ConstantValue != tfjson.UnknownConstantValue:
			out = append(out, n+" = "+constantText(e.ConstantValue))
		case len(e.References) > 0:
			out = append(out, n+" = (built from "+strings.Join(e.References, ", ")+")")
		default:
			out = append(out, n+" = (an expression)")
		}
	}
	return out
}

func constantText(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// codeFindings are the findings and the risk reasons of code: each piece
// that runs is a warning and makes the plan's risk high.
func codeFindings(code []Code) ([]report.Finding, []string) {
	var fs []report.Finding
	var reasons []string
	for _, c := range code {
		if !c.Runs {
			continue
		}
		fs = append(fs, report.Finding{
			Severity: report.SeverityWarn, Source: "terraform", Policy: "terraform.executes_code", Resource: c.Address,
			Message: "runs pushed code: " + c.String(),
		})
		reasons = append(reasons, c.String()+" runs")
	}
	return fs, reasons
}
