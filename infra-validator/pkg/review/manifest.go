package review

import (
	"bufio"
	"fmt"
	"sort"
	"strings"

	"github.com/pmezard/go-difflib/difflib"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Object diff states.
const (
	ObjectAdded   = "added"
	ObjectChanged = "changed"
	ObjectRemoved = "removed"
)

// HiddenValue stands for every value of a Secret's data and stringData.
const HiddenValue = "(hidden)"

// ObjectDiff is one rendered object that differs from the applied
// revision, as a unified diff.
type ObjectDiff struct {
	ID     string
	Status string
	Lines  []string
}

// object is one rendered Kubernetes object.
type object struct {
	id  string
	doc map[string]any
}

// splitObjects parses a rendered manifest (YAML documents separated by
// "---" lines) into objects by id, and returns the documents for the
// redactor too.
func splitObjects(manifest string) (map[string]object, []any, error) {
	out := map[string]object{}
	var docs []any
	if strings.TrimSpace(manifest) == "" {
		return out, docs, nil
	}
	var chunks []string
	var cur strings.Builder
	sc := bufio.NewScanner(strings.NewReader(manifest))
	sc.Buffer(make([]byte, 0, 64*1024), len(manifest)+1)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "---") && strings.TrimSpace(strings.TrimPrefix(line, "---")) == "" {
			chunks = append(chunks, cur.String())
			cur.Reset()
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, nil, fmt.Errorf("read manifest: %w", err)
	}
	chunks = append(chunks, cur.String())
	for i, c := range chunks {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(c), &doc); err != nil {
			return nil, nil, fmt.Errorf("document %d does not parse: %w", i+1, err)
		}
		if len(doc) == 0 {
			continue
		}
		docs = append(docs, doc)
		id := objectID(doc)
		if _, dup := out[id]; dup {
			id = fmt.Sprintf("%s (document %d)", id, i+1)
		}
		out[id] = object{id: id, doc: doc}
	}
	return out, docs, nil
}

// objectID is "Kind/namespace/name", or "Kind/name" without a namespace.
func objectID(doc map[string]any) string {
	kind, _ := doc["kind"].(string)
	meta, _ := doc["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	if kind == "" {
		kind = "?"
	}
	if ns == "" {
		return kind + "/" + name
	}
	return kind + "/" + ns + "/" + name
}

// Shown for a Secret value that differs from the applied revision's.
const HiddenChanged = "(hidden, value changed)"

// showObject renders an object as YAML (sorted keys), redacted. A
// Secret's data and stringData show their keys only: every value is
// HiddenValue, or HiddenChanged where applied (the same Secret at the
// applied revision, nil when there is none) holds another value.
func showObject(doc, applied map[string]any, red *policy.Redactor) []string {
	if kind, _ := doc["kind"].(string); kind == "Secret" {
		masked := make(map[string]any, len(doc))
		for k, v := range doc {
			masked[k] = v
		}
		for _, field := range []string{"data", "stringData"} {
			m, ok := doc[field].(map[string]any)
			if !ok {
				if _, present := doc[field]; present {
					masked[field] = HiddenValue
				}
				continue
			}
			old, _ := applied[field].(map[string]any)
			keys := make(map[string]any, len(m))
			for k, v := range m {
				keys[k] = HiddenValue
				if ov, had := old[k]; had && !equalJSON(ov, v) {
					keys[k] = HiddenChanged
				}
			}
			masked[field] = keys
		}
		doc = masked
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return []string{"(cannot be shown: " + err.Error() + ")\n"}
	}
	text := red.String(string(data))
	if !strings.HasSuffix(text, "\n") {
		text += "\n"
	}
	lines := strings.SplitAfter(text, "\n")
	return lines[:len(lines)-1] // every line ends in "\n", as difflib needs
}

// diffObjects compares the applied revision's objects with the change's,
// object by object, and counts the unchanged ones.
func diffObjects(prev, cur map[string]object, applied string, red *policy.Redactor) ([]ObjectDiff, int) {
	ids := map[string]bool{}
	for id := range prev {
		ids[id] = true
	}
	for id := range cur {
		ids[id] = true
	}
	sorted := make([]string, 0, len(ids))
	for id := range ids {
		sorted = append(sorted, id)
	}
	sort.Strings(sorted)
	fromName := "applied"
	if applied != "" {
		fromName = sluicev1.ShortSHA(applied)
	}
	var out []ObjectDiff
	unchanged := 0
	for _, id := range sorted {
		p, hadP := prev[id]
		c, hasC := cur[id]
		var a, b []string
		status := ObjectChanged
		if hadP {
			a = showObject(p.doc, nil, red)
		} else {
			status = ObjectAdded
		}
		if hasC {
			b = showObject(c.doc, p.doc, red)
		} else {
			status = ObjectRemoved
		}
		if status == ObjectChanged && strings.Join(a, "") == strings.Join(b, "") {
			unchanged++
			continue
		}
		shownID := red.String(id)
		text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{A: a, B: b, FromFile: shownID + " (" + fromName + ")", ToFile: shownID + " (this change)", Context: 3})
		if err != nil {
			text = "(cannot be compared: " + err.Error() + ")\n"
		}
		out = append(out, ObjectDiff{ID: shownID, Status: status, Lines: strings.Split(strings.TrimSuffix(text, "\n"), "\n")})
	}
	return out, unchanged
}
