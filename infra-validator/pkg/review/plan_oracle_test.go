package review

import (
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"
)

// The attribute listing as first written (every value and mark flattened
// into maps by path), kept as the oracle of attrWalker.
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
func (sc *scratch) changedAttrs(c *tfjson.Change, action string) []Attr {
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
	return out
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

// FuzzChangedAttrs: the walker lists exactly the attributes the flattening
// oracle lists, for any before, after and marks.
func FuzzChangedAttrs(f *testing.F) {
	f.Add(`{"a":1,"t":{"x":"y"},"l":[1,2]}`, `{"a":2,"t":{},"l":[1],"n":null}`, `{"t":{"x":true}}`, `{"a":true}`, `{"id":true,"l":[false,true]}`, "update")
	f.Add(`null`, `{"ami":"x","tags":{"o":"a"},"r":[{"e":true}]}`, `false`, `{}`, `{"id":true,"r":[{"x":true}]}`, "create")
	f.Add(`{"a":{"b":1}}`, `{"a":"s"}`, `{}`, `{}`, `{"a":{"c":true}}`, "replace")
	f.Add(`{"a":[]}`, `{"a":{}}`, `true`, `true`, `true`, "update")
	f.Fuzz(func(t *testing.T, before, after, bSens, aSens, unknown, action string) {
		var c tfjson.Change
		for _, p := range []struct {
			s   string
			dst *any
		}{{before, &c.Before}, {after, &c.After}, {bSens, &c.BeforeSensitive}, {aSens, &c.AfterSensitive}, {unknown, &c.AfterUnknown}} {
			if json.Unmarshal([]byte(p.s), p.dst) != nil {
				return
			}
		}
		if action != ActionCreate {
			action = ActionUpdate
		}
		want := newScratch().changedAttrs(&c, action)
		got := (&attrWalker{}).changedAttrs(&c, action)
		if !slices.Equal(got, want) {
			t.Fatalf("walker:\n%v\noracle:\n%v", got, want)
		}
	})
}

// FuzzHasControl: the byte scan finds exactly what a scan by rune finds.
func FuzzHasControl(f *testing.F) {
	for _, s := range []string{"plain", "tab\tok", "bell\a", "del\x7f", "c1 \u0085", "\xc2", "\xc2\x80", "\xff\xfe", "ok \u00a0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := hasControl(s), strings.ContainsFunc(s, isControl); got != want {
			t.Fatalf("hasControl(%q) = %v, by rune %v", s, got, want)
		}
	})
}
