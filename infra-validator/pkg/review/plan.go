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
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"

	"github.com/sluice-gitops/sluice/kit/text"
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
	// Code is the pushed code the plan runs (provisioners of resources it
	// creates, replaces or destroys, external data sources, providers new
	// to the stack), shown before the resources.
	Code []Code `json:",omitempty"`
}

// Code is one piece of pushed code a plan runs (terraform.Code, redacted).
type Code struct {
	// What names it: `provisioner "local-exec" of terraform_data.queue`.
	What string
	// Text is what it runs ("command = …"), one entry per argument.
	Text []string `json:",omitempty"`
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

// planValues returns the values of a plan's resource changes (when
// changes is set) and variables for the redactor, which finds the
// sensitive ones by their marks; nil without a plan. The variables are
// keyed by their names here (a variable named like a password is a
// secret), which the plan's own document does not do.
func planValues(p *tfjson.Plan, changes bool) any {
	if p == nil {
		return nil
	}
	values := make([]any, 0, len(p.ResourceChanges)+1)
	for _, rc := range p.ResourceChanges {
		if !changes {
			break
		}
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
	w := &attrWalker{}
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil {
			continue
		}
		action := actionOf(rc.Change.Actions)
		if action == "" {
			continue
		}
		r := Resource{Address: rc.Address, Action: action}
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
			r.Attrs = w.changedAttrs(rc.Change, action)
		}
		out.Resources = append(out.Resources, r)
	}
	redactResources(out.Resources, red)
	out.Code = runningCode(p, red)
	slices.SortStableFunc(out.Resources, func(a, b Resource) int {
		if c := cmp.Compare(actionOrder[a.Action], actionOrder[b.Action]); c != 0 {
			return c
		}
		return strings.Compare(a.Address, b.Address)
	})
	return out
}

// runningCode is the code of terraform.ExecutedCode that the plan runs,
// redacted: a command may quote a value the run was given.
func runningCode(p *tfjson.Plan, red *policy.Redactor) []Code {
	var out []Code
	for _, c := range terraform.ExecutedCode(p) {
		if !c.Runs {
			continue
		}
		text := make([]string, len(c.Text))
		for i, t := range c.Text {
			text[i] = red.String(t)
		}
		c.Text = nil
		out = append(out, Code{What: red.String(c.String()), Text: text})
	}
	return out
}

// attrWalker lists the changed attributes of one resource change by
// walking its before and after values and Terraform's sensitive and
// unknown marks side by side, once, without flattening them into maps.
type attrWalker struct {
	create bool
	forces map[string]bool
	// all is a chunk of attributes shared by many resources, each
	// resource's a sub-slice (one allocation for many resources, none
	// copied when a chunk fills up but the current resource's); start is
	// where the current resource's begin.
	all   []Attr
	start int
}

// attrChunk is how many attributes attrWalker allocates at a time.
const attrChunk = 1024

// changedAttrs lists the attributes a change sets (create) or changes
// (update, replace), with sensitive and unknown values shown as such. A
// path is a leaf of before (not for a create) or after ("tags.env",
// "ingress[0].port"; an empty map or list is a leaf of its own) or a path
// Terraform marks unknown; a value that becomes unknown replaces what was
// under it, so only the unknown path is shown.
func (w *attrWalker) changedAttrs(c *tfjson.Change, action string) []Attr {
	w.create = action == ActionCreate
	w.start = len(w.all)
	clear(w.forces)
	for _, rp := range c.ReplacePaths {
		if w.forces == nil {
			w.forces = map[string]bool{}
		}
		w.forces[replacePath(rp)] = true
	}
	var before any
	hasB := false
	if !w.create {
		before, hasB = c.Before, true
	}
	w.walk("", before, hasB, c.After, true, c.BeforeSensitive, c.AfterSensitive, c.AfterUnknown, false, false, false)
	out := w.all[w.start:len(w.all):len(w.all)]
	if len(out) == 0 {
		return nil
	}
	slices.SortFunc(out, func(a, b Attr) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// walk visits path with its before and after values (hasB, hasA: the
// value exists), the marks below path (bsM, asM, unkM: true, a map, a
// list or nil) and whether a strict ancestor is marked (bsUp, asUp,
// unkUp).
func (w *attrWalker) walk(path string, b any, hasB bool, a any, hasA bool, bsM, asM, unkM any, bsUp, asUp, unkUp bool) {
	unkHere := unkM == true
	if path != "" {
		if unkHere {
			w.emit(path, b, hasB && isLeaf(b), a, hasA && isLeaf(a), true, bsUp || bsM == true, asUp || asM == true)
			return
		}
		if unkUp {
			return
		}
		bLeaf, aLeaf := hasB && isLeaf(b), hasA && isLeaf(a)
		if bLeaf || aLeaf {
			w.emit(path, b, bLeaf, a, aLeaf, false, bsUp || bsM == true, asUp || asM == true)
		}
	} else if unkHere {
		return
	}
	bs, as := bsUp || bsM == true, asUp || asM == true
	bm, _ := b.(map[string]any)
	am, _ := a.(map[string]any)
	um, _ := unkM.(map[string]any)
	if !hasB {
		bm = nil
	}
	if !hasA {
		am = nil
	}
	for k, bc := range bm {
		ac, okA := am[k]
		w.walk(join(path, k), bc, true, ac, okA, markAt(bsM, k), markAt(asM, k), markAt(unkM, k), bs, as, false)
	}
	for k, ac := range am {
		if _, seen := bm[k]; seen {
			continue
		}
		w.walk(join(path, k), nil, false, ac, true, markAt(bsM, k), markAt(asM, k), markAt(unkM, k), bs, as, false)
	}
	for k, uc := range um {
		if _, seen := bm[k]; seen {
			continue
		}
		if _, seen := am[k]; seen {
			continue
		}
		w.walkMarks(join(path, k), uc)
	}
	bl, _ := b.([]any)
	al, _ := a.([]any)
	ul, _ := unkM.([]any)
	if !hasB {
		bl = nil
	}
	if !hasA {
		al = nil
	}
	n := max(len(bl), len(al))
	for i := 0; i < n; i++ {
		var bc, ac any
		okB, okA := i < len(bl), i < len(al)
		if okB {
			bc = bl[i]
		}
		if okA {
			ac = al[i]
		}
		w.walk(path+"["+strconv.Itoa(i)+"]", bc, okB, ac, okA, indexAt(bsM, i), indexAt(asM, i), indexAt(unkM, i), bs, as, false)
	}
	for i := n; i < len(ul); i++ {
		w.walkMarks(path+"["+strconv.Itoa(i)+"]", ul[i])
	}
}

// walkMarks emits the unknown paths below path where neither value has
// anything.
func (w *attrWalker) walkMarks(path string, unkM any) {
	switch t := unkM.(type) {
	case bool:
		if t {
			w.emit(path, nil, false, nil, false, true, false, false)
		}
	case map[string]any:
		for k, c := range t {
			w.walkMarks(join(path, k), c)
		}
	case []any:
		for i, c := range t {
			w.walkMarks(path+"["+strconv.Itoa(i)+"]", c)
		}
	}
}

// emit adds path unless nothing about it changes.
func (w *attrWalker) emit(path string, b any, hasB bool, a any, hasA bool, unknown, bs, as bool) {
	if !w.create && !unknown && hasA == hasB && equalJSON(a, b) && bs == as {
		return
	}
	attr := Attr{Path: path, Before: "null", After: "null", Forces: len(w.forces) > 0 && marked(path, w.forces)}
	switch {
	case bs && hasB:
		attr.Before = SensitiveValue
	case hasB:
		attr.Before = showValue(b)
	}
	switch {
	case unknown:
		attr.After = UnknownValue
	case as && hasA:
		attr.After = SensitiveValue
	case hasA:
		attr.After = showValue(a)
	}
	if len(w.all) == cap(w.all) {
		cur := w.all[w.start:]
		chunk := make([]Attr, len(cur), max(attrChunk, 2*len(cur)))
		copy(chunk, cur)
		w.all, w.start = chunk, 0
	}
	w.all = append(w.all, attr)
}

// isLeaf: flatten's leaves are values other than maps and lists, and
// empty maps and lists.
func isLeaf(v any) bool {
	switch t := v.(type) {
	case map[string]any:
		return len(t) == 0
	case []any:
		return len(t) == 0
	}
	return true
}

func markAt(m any, k string) any {
	if t, ok := m.(map[string]any); ok {
		return t[k]
	}
	return nil
}

func indexAt(m any, i int) any {
	if t, ok := m.([]any); ok && i < len(t) {
		return t[i]
	}
	return nil
}

// redactResources redacts the addresses, paths and values of a plan's
// resources in one pass over their joined text, which is much cheaper
// than one pass per value on a large plan and catches the same secrets
// (a value is never cut before it is redacted: a cut secret would no
// longer match).
func redactResources(rs []Resource, red *policy.Redactor) {
	n := 0
	for _, r := range rs {
		n += len(r.Address) + 1
		for _, a := range r.Attrs {
			n += len(a.Path) + len(a.Before) + len(a.After) + 3
		}
	}
	var b strings.Builder
	b.Grow(n)
	for _, r := range rs {
		b.WriteString(r.Address)
		b.WriteByte(0)
		for _, a := range r.Attrs {
			b.WriteString(a.Path)
			b.WriteByte(0)
			b.WriteString(a.Before)
			b.WriteByte(0)
			b.WriteString(a.After)
			b.WriteByte(0)
		}
	}
	joined := b.String()
	redacted := red.String(joined)
	parts := []string(nil)
	if redacted != joined {
		parts = strings.Split(redacted, "\x00")
		if len(parts) != n3(rs)+1 {
			// A pattern swallowed a separator: redact value by value.
			for i := range rs {
				r := &rs[i]
				r.Address = red.String(r.Address)
				for j := range r.Attrs {
					a := &r.Attrs[j]
					a.Path, a.Before, a.After = red.String(a.Path), text.Truncate(red.String(a.Before), maxValueLen), text.Truncate(red.String(a.After), maxValueLen)
				}
			}
			return
		}
	}
	k := 0
	for i := range rs {
		r := &rs[i]
		if parts != nil {
			r.Address = parts[k]
		}
		k++
		for j := range r.Attrs {
			a := &r.Attrs[j]
			if parts != nil {
				a.Path, a.Before, a.After = parts[k], parts[k+1], parts[k+2]
			}
			a.Before, a.After = text.Truncate(a.Before, maxValueLen), text.Truncate(a.After, maxValueLen)
			k += 3
		}
	}
}

// n3 counts the texts redactResources joins.
func n3(rs []Resource) int {
	n := 0
	for _, r := range rs {
		n += 1 + 3*len(r.Attrs)
	}
	return n
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

// showValue is a value as JSON on one line; redactResources redacts and caps
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
		if plainJSON(t) {
			return `"` + t + `"`
		}
		data, _ := json.Marshal(t)
		return string(data)
	}
	data, err := json.Marshal(v)
	if err != nil {
		return "?"
	}
	return string(data)
}

// plainJSON reports whether json.Marshal would quote s unchanged: ASCII
// without quotes, backslashes, control characters or the HTML characters
// it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// Summary says what the plan does in one line.
func (p *Plan) Summary() string {
	if p.Err != "" {
		return "the plan cannot be shown: " + p.Err
	}
	code := ""
	if len(p.Code) > 0 {
		code = fmt.Sprintf("; runs pushed code (%d, marked !)", len(p.Code))
	}
	if len(p.Resources) == 0 {
		return "no changes" + code
	}
	parts := []string{fmt.Sprintf("%d to create", p.Create), fmt.Sprintf("%d to update", p.Update),
		fmt.Sprintf("%d to replace", p.Replace), fmt.Sprintf("%d to destroy", p.Destroy)}
	if p.Read > 0 {
		parts = append(parts, fmt.Sprintf("%d to read", p.Read))
	}
	return strings.Join(parts, ", ") + code
}

// Lines renders the plan as Terraform prints it, one line per resource
// and per changed attribute. The lines share one backing string.
func (p *Plan) Lines() []string {
	n, count := 0, 0
	for _, r := range p.Resources {
		n += len(r.Address) + 30
		count += 1 + len(r.Attrs)
		for _, a := range r.Attrs {
			n += len(a.Path) + len(a.Before) + len(a.After) + 32
		}
	}
	var b strings.Builder
	b.Grow(n)
	ends := make([]int, 0, count)
	line := func(parts ...string) {
		for _, s := range parts {
			b.WriteString(s)
		}
		ends = append(ends, b.Len())
	}
	// Pushed code first: it can do anything the run can, whatever the
	// resources it hangs on.
	for _, c := range p.Code {
		line("! runs ", oneLine(c.What))
		for _, t := range c.Text {
			for _, l := range strings.Split(t, "\n") {
				line("!     ", l)
			}
		}
	}
	for _, r := range p.Resources {
		switch r.Action {
		case ActionCreate:
			line("+ ", r.Address, " will be created")
		case ActionUpdate:
			line("~ ", r.Address, " will be updated in-place")
		case ActionReplace:
			line("-/+ ", r.Address, " must be replaced")
		case ActionDestroy:
			line("- ", r.Address, " will be destroyed")
		case ActionRead:
			line("<= ", r.Address, " will be read during apply")
		}
		for _, a := range r.Attrs {
			switch {
			case r.Action == ActionCreate || r.Action == ActionRead:
				line("    + ", a.Path, " = ", a.After)
			case a.Before == "null":
				line("    + ", a.Path, " = ", a.After, forces(a))
			case a.After == "null":
				line("    - ", a.Path, " = ", a.Before, forces(a))
			default:
				line("    ~ ", a.Path, " = ", a.Before, " -> ", a.After, forces(a))
			}
		}
	}
	all := b.String()
	out := make([]string, len(ends))
	start := 0
	for i, e := range ends {
		out[i] = all[start:e]
		start = e
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
	for _, c := range p.Code {
		out = append(out, oneLine(c.What)+": runs")
	}
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
