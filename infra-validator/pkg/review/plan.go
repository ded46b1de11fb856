package review

import (
	"cmp"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Plan actions as shown.
const (
	ActionCreate  = "create"
	ActionUpdate  = "update"
	ActionReplace = "replace"
	ActionDestroy = "destroy"
	ActionRead    = "read"
)

// Shown in place of values a reviewer must not, or cannot, see.
const (
	SensitiveValue = "(sensitive value)"
	UnknownValue   = "(known after apply)"
)

// maxValueLen caps one attribute value as shown.
const maxValueLen = 300

// Plan is a Terraform plan as a reviewer reads it.
type Plan struct {
	// Err says why the plan could not be read.
	Err                                    string
	Create, Update, Replace, Destroy, Read int
	Resources                              []Resource
}

// Resource is one resource change.
type Resource struct {
	Address string
	Action  string
	Attrs   []Attr
}

// Attr is one changed attribute; Before and After are shown values
// (JSON, or SensitiveValue/UnknownValue).
type Attr struct {
	Path          string
	Before, After string
	// Forces marks an attribute whose change forces the replacement.
	Forces bool
}

var actionOrder = map[string]int{ActionCreate: 0, ActionUpdate: 1, ActionReplace: 2, ActionDestroy: 3, ActionRead: 4}

// parsePlan decodes plan JSON into terraform-json's types.
func parsePlan(data []byte) (*tfjson.Plan, error) {
	if len(data) == 0 {
		return nil, nil
	}
	var p tfjson.Plan
	// UnmarshalJSON directly: json.Unmarshal would scan the input once
	// more before handing it over.
	if err := p.UnmarshalJSON(data); err != nil {
		return nil, fmt.Errorf("the plan JSON cannot be read: %w", err)
	}
	return &p, nil
}

// planValues returns the values of a plan's resource changes and
// variables for the redactor, which finds the sensitive ones by their
// marks; nil without a plan.
func planValues(p *tfjson.Plan) any {
	if p == nil {
		return nil
	}
	values := make([]any, 0, len(p.ResourceChanges)+1)
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		c := rc.Change
		values = append(values, map[string]any{"before": c.Before, "after": c.After, "before_sensitive": c.BeforeSensitive, "after_sensitive": c.AfterSensitive})
	}
	vars := map[string]any{}
	for k, v := range p.Variables {
		if v != nil {
			vars[k] = v.Value
		}
	}
	return append(values, vars)
}

// actionOf names a change's actions; "" for a no-op.
func actionOf(a tfjson.Actions) string {
	switch {
	case a.Replace():
		return ActionReplace
	case a.Create():
		return ActionCreate
	case a.Update():
		return ActionUpdate
	case a.Delete():
		return ActionDestroy
	case a.Read():
		return ActionRead
	}
	return ""
}

func buildPlan(p *tfjson.Plan, red *policy.Redactor) *Plan {
	out := &Plan{Resources: make([]Resource, 0, len(p.ResourceChanges))}
	sc := newScratch()
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		action := actionOf(rc.Change.Actions)
		if action == "" {
			continue
		}
		r := Resource{Address: red.String(rc.Address), Action: action}
		switch action {
		case ActionCreate:
			out.Create++
		case ActionUpdate:
			out.Update++
		case ActionReplace:
			out.Replace++
		case ActionDestroy:
			out.Destroy++
		case ActionRead:
			out.Read++
		}
		if action != ActionDestroy {
			r.Attrs = sc.changedAttrs(rc.Change, action, red)
		}
		out.Resources = append(out.Resources, r)
	}
	slices.SortStableFunc(out.Resources, func(a, b Resource) int {
		if c := cmp.Compare(actionOrder[a.Action], actionOrder[b.Action]); c != 0 {
			return c
		}
		return strings.Compare(a.Address, b.Address)
	})
	return out
}

// scratch holds the maps changedAttrs fills for one resource, reused
// across the resources of a plan.
type scratch struct {
	before, after                 map[string]any
	bSens, aSens, unknown, forces map[string]bool
	paths                         map[string]bool
}

func newScratch() *scratch {
	return &scratch{before: map[string]any{}, after: map[string]any{}, bSens: map[string]bool{}, aSens: map[string]bool{},
		unknown: map[string]bool{}, forces: map[string]bool{}, paths: map[string]bool{}}
}

// changedAttrs lists the attributes a change sets (create) or changes
// (update, replace), with sensitive and unknown values shown as such.
func (sc *scratch) changedAttrs(c *tfjson.Change, action string, red *policy.Redactor) []Attr {
	before, after, bSens, aSens, unknown, forces, paths := sc.before, sc.after, sc.bSens, sc.aSens, sc.unknown, sc.forces, sc.paths
	for _, m := range []map[string]bool{bSens, aSens, unknown, forces, paths} {
		clear(m)
	}
	clear(before)
	clear(after)
	if action != ActionCreate {
		flatten("", c.Before, before)
	}
	flatten("", c.After, after)
	flattenMarks("", c.BeforeSensitive, bSens)
	flattenMarks("", c.AfterSensitive, aSens)
	flattenMarks("", c.AfterUnknown, unknown)
	for _, rp := range c.ReplacePaths {
		forces[replacePath(rp)] = true
	}

	for k := range before {
		paths[k] = true
	}
	for k := range after {
		paths[k] = true
	}
	for k := range unknown {
		if k != "" {
			paths[k] = true
		}
	}
	// A value that becomes unknown replaces what was under it: show the
	// unknown path only.
	if len(unknown) > 0 {
		for k := range paths {
			if k != "" && marked(parent(k), unknown) && !unknown[k] {
				delete(paths, k)
			}
		}
	}
	out := make([]Attr, 0, len(paths))
	for k := range paths {
		if k == "" {
			continue
		}
		b, hasB := before[k]
		a, hasA := after[k]
		isUnknown := marked(k, unknown)
		bs, as := marked(k, bSens), marked(k, aSens)
		if action != ActionCreate && !isUnknown && hasA == hasB && equalJSON(a, b) && bs == as {
			continue
		}
		attr := Attr{Path: k, Before: "null", After: "null", Forces: marked(k, forces)}
		switch {
		case bs && hasB:
			attr.Before = SensitiveValue
		case hasB:
			attr.Before = showValue(b)
		}
		switch {
		case isUnknown:
			attr.After = UnknownValue
		case as && hasA:
			attr.After = SensitiveValue
		case hasA:
			attr.After = showValue(a)
		}
		out = append(out, attr)
	}
	slices.SortFunc(out, func(a, b Attr) int { return strings.Compare(a.Path, b.Path) })
	redactAttrs(out, red)
	return out
}

// redactAttrs redacts the paths and values of one resource's attributes
// in one pass over their joined text, which is much cheaper than one per
// value on a large plan and catches the same secrets.
func redactAttrs(attrs []Attr, red *policy.Redactor) {
	if len(attrs) == 0 {
		return
	}
	var b strings.Builder
	for _, a := range attrs {
		b.WriteString(a.Path)
		b.WriteByte(0)
		b.WriteString(a.Before)
		b.WriteByte(0)
		b.WriteString(a.After)
		b.WriteByte(0)
	}
	joined := b.String()
	redacted := red.String(joined)
	if redacted == joined {
		return
	}
	parts := strings.Split(redacted, "\x00")
	if len(parts) != 3*len(attrs)+1 {
		// A pattern swallowed a separator: redact value by value.
		for i := range attrs {
			attrs[i].Path, attrs[i].Before, attrs[i].After = red.String(attrs[i].Path), red.String(attrs[i].Before), red.String(attrs[i].After)
		}
		return
	}
	for i := range attrs {
		attrs[i].Path, attrs[i].Before, attrs[i].After = parts[3*i], sluicev1.Truncate(parts[3*i+1], maxValueLen), sluicev1.Truncate(parts[3*i+2], maxValueLen)
	}
}

// flatten records the leaves of v by path ("tags.env", "ingress[0].port");
// an empty map or list is a leaf of its own.
func flatten(prefix string, v any, out map[string]any) {
	switch t := v.(type) {
	case map[string]any:
		if len(t) == 0 && prefix != "" {
			out[prefix] = t
		}
		for k, c := range t {
			flatten(join(prefix, k), c, out)
		}
	case []any:
		if len(t) == 0 && prefix != "" {
			out[prefix] = t
		}
		for i, c := range t {
			flatten(prefix+"["+strconv.Itoa(i)+"]", c, out)
		}
	default:
		if prefix != "" {
			out[prefix] = v
		}
	}
}

// flattenMarks records the paths Terraform marks true (sensitive or
// unknown); "" marks the whole value.
func flattenMarks(prefix string, m any, out map[string]bool) {
	switch t := m.(type) {
	case bool:
		if t {
			out[prefix] = true
		}
	case map[string]any:
		for k, c := range t {
			flattenMarks(join(prefix, k), c, out)
		}
	case []any:
		for i, c := range t {
			flattenMarks(prefix+"["+strconv.Itoa(i)+"]", c, out)
		}
	}
}

// marked reports whether path or one of its parents is marked.
func marked(path string, marks map[string]bool) bool {
	if len(marks) == 0 {
		return false
	}
	for {
		if marks[path] {
			return true
		}
		if path == "" {
			return false
		}
		path = parent(path)
	}
}

// parent cuts the last step of a path ("a.b[0]" → "a.b" → "a" → "").
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

func join(prefix, key string) string {
	if prefix == "" {
		return key
	}
	return prefix + "." + key
}

// replacePath turns one of Terraform's replace_paths (a list of keys and
// indexes) into a path.
func replacePath(rp any) string {
	steps, ok := rp.([]any)
	if !ok {
		return ""
	}
	p := ""
	for _, s := range steps {
		switch t := s.(type) {
		case string:
			p = join(p, t)
		case float64:
			p += "[" + strconv.Itoa(int(t)) + "]"
		}
	}
	return p
}

// equalJSON compares two decoded JSON values (leaves compare directly).
func equalJSON(a, b any) bool {
	switch x := a.(type) {
	case string:
		y, ok := b.(string)
		return ok && x == y
	case bool:
		y, ok := b.(bool)
		return ok && x == y
	case float64:
		y, ok := b.(float64)
		return ok && x == y
	case nil:
		return b == nil
	}
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

// showValue is a value as JSON on one line; redactAttrs redacts and caps
// it.
func showValue(v any) string {
	switch t := v.(type) {
	case bool:
		return strconv.FormatBool(t)
	case float64:
		return strconv.FormatFloat(t, 'g', -1, 64)
	case string:
		// Whole, never cut before redaction: a cut secret would no
		// longer match its value.
		data, _ := json.Marshal(t)
		return string(data)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(data)
}

// Summary says what the plan does in one line.
func (p *Plan) Summary() string {
	if p.Err != "" {
		return "the plan cannot be shown: " + p.Err
	}
	if len(p.Resources) == 0 {
		return "no changes"
	}
	parts := []string{fmt.Sprintf("%d to create", p.Create), fmt.Sprintf("%d to update", p.Update),
		fmt.Sprintf("%d to replace", p.Replace), fmt.Sprintf("%d to destroy", p.Destroy)}
	if p.Read > 0 {
		parts = append(parts, fmt.Sprintf("%d to read", p.Read))
	}
	return strings.Join(parts, ", ")
}

// Lines renders the plan as Terraform prints it, one line per resource
// and per changed attribute.
func (p *Plan) Lines() []string {
	var out []string
	for _, r := range p.Resources {
		switch r.Action {
		case ActionCreate:
			out = append(out, "+ "+r.Address+" will be created")
		case ActionUpdate:
			out = append(out, "~ "+r.Address+" will be updated in-place")
		case ActionReplace:
			out = append(out, "-/+ "+r.Address+" must be replaced")
		case ActionDestroy:
			out = append(out, "- "+r.Address+" will be destroyed")
		case ActionRead:
			out = append(out, "<= "+r.Address+" will be read during apply")
		}
		for _, a := range r.Attrs {
			switch {
			case r.Action == ActionCreate || r.Action == ActionRead:
				out = append(out, "    + "+a.Path+" = "+a.After)
			case a.Before == "null":
				out = append(out, "    + "+a.Path+" = "+a.After+forces(a))
			case a.After == "null":
				out = append(out, "    - "+a.Path+" = "+a.Before+forces(a))
			default:
				out = append(out, "    ~ "+a.Path+" = "+a.Before+" -> "+a.After+forces(a))
			}
		}
	}
	return out
}

func forces(a Attr) string {
	if a.Forces {
		return " # forces replacement"
	}
	return ""
}

// riskReasons names the plan's destroys and replacements, the changes
// the validator rates highest.
func (p *Plan) riskReasons() []string {
	var out []string
	for _, r := range p.Resources {
		switch r.Action {
		case ActionDestroy:
			out = append(out, r.Address+": destroyed")
		case ActionReplace:
			out = append(out, r.Address+": replaced")
		}
		if len(out) == 20 {
			out = append(out, "…")
			break
		}
	}
	return out
}
