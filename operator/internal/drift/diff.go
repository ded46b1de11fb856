package drift

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
)

// MaxFields is how many changed field paths are reported per object.
const MaxFields = 20

// serverSet are the metadata fields the API server sets on every write;
// they are never drift.
var serverSet = []string{"managedFields", "resourceVersion", "generation", "creationTimestamp", "uid", "selfLink"}

// ChangedFields compares what re-applying the approved object would give
// (want: the server-side dry-run apply of the approved object over the live
// one) with the live object, and returns the paths of the fields that
// differ, sorted, at most MaxFields (and how many were left out).
//
// It ignores what the API server sets (status, resourceVersion, generation,
// managedFields…) and every field whose owner, in the live object's
// managedFields, is one of the ignored managers (e.g. replicas that the
// HorizontalPodAutoscaler, acting as kube-controller-manager, sets through
// the scale subresource). A field such a manager owns is masked in both
// objects before they are compared.
func ChangedFields(want, live map[string]any, ignoreManagers []string) ([]string, int) {
	w, l := strip(want), strip(live)
	for _, owned := range ownedBy(live, ignoreManagers) {
		w = mask(w, owned)
		l = mask(l, owned)
	}
	var paths []string
	walk("", w, l, &paths)
	sort.Strings(paths)
	if len(paths) > MaxFields {
		return paths[:MaxFields], len(paths) - MaxFields
	}
	return paths, 0
}

// strip returns a deep copy without status and the server-set metadata.
func strip(obj map[string]any) map[string]any {
	out := deepCopy(obj).(map[string]any)
	delete(out, "status")
	if md, ok := out["metadata"].(map[string]any); ok {
		for _, k := range serverSet {
			delete(md, k)
		}
	}
	return out
}

func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, x := range t {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, x := range t {
			s[i] = deepCopy(x)
		}
		return s
	}
	return v
}

// ownedBy returns the fieldsV1 sets of the live object's managedFields
// entries whose manager is one of managers.
func ownedBy(live map[string]any, managers []string) []map[string]any {
	md, _ := live["metadata"].(map[string]any)
	entries, _ := md["managedFields"].([]any)
	var out []map[string]any
	for _, e := range entries {
		m, _ := e.(map[string]any)
		name, _ := m["manager"].(string)
		if !slices.Contains(managers, name) {
			continue
		}
		if f, ok := m["fieldsV1"].(map[string]any); ok {
			out = append(out, f)
		}
	}
	return out
}

// mask removes from v every leaf field of the fieldsV1 set f ("f:name",
// "k:{…}" list keys, "v:…" set values, "i:N" indexes).
func mask(v map[string]any, f map[string]any) map[string]any {
	out, _ := maskValue(v, f)
	m, _ := out.(map[string]any)
	if m == nil {
		m = map[string]any{}
	}
	return m
}

// maskValue returns v without the fields of f, and whether v itself is
// owned as a leaf (and so goes).
func maskValue(v any, f map[string]any) (any, bool) {
	if isLeaf(f) {
		return nil, true
	}
	switch t := v.(type) {
	case map[string]any:
		for k, sub := range f {
			name, ok := strings.CutPrefix(k, "f:")
			if !ok {
				continue
			}
			child, present := t[name]
			if !present {
				continue
			}
			subSet, _ := sub.(map[string]any)
			nv, gone := maskValue(child, subSet)
			if gone {
				delete(t, name)
			} else {
				t[name] = nv
			}
		}
		return t, false
	case []any:
		drop := map[int]bool{}
		for k, sub := range f {
			subSet, _ := sub.(map[string]any)
			for i, el := range t {
				if !matches(k, i, el) {
					continue
				}
				nv, gone := maskValue(el, subSet)
				if gone {
					drop[i] = true
				} else {
					t[i] = nv
				}
			}
		}
		out := t[:0:0]
		for i, el := range t {
			if !drop[i] {
				out = append(out, el)
			}
		}
		return out, false
	}
	return v, false
}

// isLeaf reports whether a fieldsV1 node owns its field as a whole: no
// children besides ".".
func isLeaf(f map[string]any) bool {
	for k := range f {
		if k != "." {
			return false
		}
	}
	return true
}

// matches reports whether list element el at index i is the one a fieldsV1
// list key names.
func matches(key string, i int, el any) bool {
	switch {
	case strings.HasPrefix(key, "k:"):
		var want map[string]any
		if json.Unmarshal([]byte(key[2:]), &want) != nil {
			return false
		}
		m, ok := el.(map[string]any)
		if !ok {
			return false
		}
		for k, x := range want {
			if fmt.Sprint(m[k]) != fmt.Sprint(x) {
				return false
			}
		}
		return true
	case strings.HasPrefix(key, "v:"):
		var want any
		if json.Unmarshal([]byte(key[2:]), &want) != nil {
			return false
		}
		return sameScalar(el, want) || reflect.DeepEqual(normalise(el), normalise(want))
	case strings.HasPrefix(key, "i:"):
		return key[2:] == fmt.Sprint(i)
	}
	return false
}

// normalise makes JSON numbers comparable whatever decoded them.
func normalise(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return v
	}
	var out any
	_ = json.Unmarshal(b, &out)
	return out
}

// walk appends the paths under prefix where want and live differ.
func walk(prefix string, want, live any, paths *[]string) {
	switch w := want.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			*paths = append(*paths, orRoot(prefix))
			return
		}
		keys := map[string]bool{}
		for k := range w {
			keys[k] = true
		}
		for k := range l {
			keys[k] = true
		}
		for k := range keys {
			walk(join(prefix, k), w[k], l[k], paths)
		}
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(w) {
			*paths = append(*paths, orRoot(prefix))
			return
		}
		for i := range w {
			walk(prefix+index(w[i], i), w[i], l[i], paths)
		}
	default:
		if !sameScalar(want, live) {
			*paths = append(*paths, orRoot(prefix))
		}
	}
}

// sameScalar compares two JSON scalars; numbers compare by value whatever
// decoded them (int64 from the API machinery, float64 from encoding/json).
func sameScalar(a, b any) bool {
	if x, ok := number(a); ok {
		y, ok := number(b)
		return ok && x == y
	}
	switch a.(type) {
	case map[string]any, []any:
		return reflect.DeepEqual(normalise(a), normalise(b))
	}
	return a == b
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case float64:
		return n, true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

// Subset reports whether every field the approved object sets has the same
// value live (lists element by element, of the same length). When it does,
// re-applying the approved object changes nothing, so there is no drift
// and no dry-run is needed; when it does not, the dry-run decides, since
// the API server may write a value differently than the chart did
// (defaults, quantities).
func Subset(approved, live any) bool {
	switch a := approved.(type) {
	case map[string]any:
		l, ok := live.(map[string]any)
		if !ok {
			return false
		}
		for k, v := range a {
			lv, present := l[k]
			if !present {
				if v == nil {
					continue
				}
				return false
			}
			if !Subset(v, lv) {
				return false
			}
		}
		return true
	case []any:
		l, ok := live.([]any)
		if !ok || len(l) != len(a) {
			return false
		}
		for i := range a {
			if !Subset(a[i], l[i]) {
				return false
			}
		}
		return true
	case nil:
		return live == nil
	}
	return sameScalar(approved, live)
}

func join(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "." + k
}

func orRoot(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// index names a list element by its name field when it has one
// (containers[name=web]), else by position.
func index(el any, i int) string {
	if m, ok := el.(map[string]any); ok {
		if n, ok := m["name"].(string); ok {
			return "[name=" + n + "]"
		}
	}
	return fmt.Sprintf("[%d]", i)
}
