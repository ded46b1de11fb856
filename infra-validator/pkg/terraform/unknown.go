package terraform

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	tfjson "github.com/hashicorp/terraform-json"
)

// UnknownPaths lists the attribute paths of a resource change whose values
// are unknown until apply (after_unknown), as "a.b[0].c", sorted. A whole
// unknown object is reported at its own path; "" is never returned, an
// entirely unknown resource is reported as "*".
func UnknownPaths(rc *tfjson.ResourceChange) []string {
	if rc == nil || rc.Change == nil {
		return nil
	}
	var out []string
	collectUnknown(rc.Change.AfterUnknown, "", &out)
	sort.Strings(out)
	return out
}

func collectUnknown(v any, prefix string, out *[]string) {
	switch t := v.(type) {
	case bool:
		if t {
			if prefix == "" {
				prefix = "*"
			}
			*out = append(*out, prefix)
		}
	case map[string]any:
		for k, c := range t {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			collectUnknown(c, p, out)
		}
	case []any:
		for i, c := range t {
			collectUnknown(c, fmt.Sprintf("%s[%d]", prefix, i), out)
		}
	}
}

// IsUnknown reports whether the value at an attribute path of a resource
// change, or anything below it, is unknown until apply. The path is dotted
// ("ingress.0.cidr_blocks" or "ingress[0].cidr_blocks"); "*" matches any
// list index or map key. A policy layer calls this for every attribute a
// check reads, and reports "unverifiable" instead of passing.
func IsUnknown(rc *tfjson.ResourceChange, path string) bool {
	if rc == nil || rc.Change == nil {
		return false
	}
	return len(unknownMatches(rc.Change.AfterUnknown, splitPath(path), "")) > 0
}

var pathReplacer = strings.NewReplacer("[", ".", "]", "")

// splitPath turns "a.b[0].c" or "a.b.0.c" into ["a","b","0","c"].
func splitPath(p string) []string {
	p = pathReplacer.Replace(p)
	var out []string
	for _, s := range strings.Split(p, ".") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// unknownMatches walks after_unknown along the path segments and returns
// the concrete paths at or above which a value is unknown.
func unknownMatches(v any, segs []string, prefix string) []string {
	if b, ok := v.(bool); ok {
		if b {
			if prefix == "" {
				prefix = "*"
			}
			return []string{prefix}
		}
		return nil
	}
	if len(segs) == 0 {
		var all []string
		collectUnknown(v, prefix, &all)
		sort.Strings(all)
		if len(all) > 0 {
			return []string{prefix}
		}
		return nil
	}
	seg, rest := segs[0], segs[1:]
	var out []string
	switch t := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(t))
		for k := range t {
			if seg == "*" || k == seg {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out = append(out, unknownMatches(t[k], rest, p)...)
		}
	case []any:
		for i, c := range t {
			if seg != "*" && seg != strconv.Itoa(i) {
				continue
			}
			out = append(out, unknownMatches(c, rest, fmt.Sprintf("%s[%d]", prefix, i))...)
		}
	}
	return out
}
