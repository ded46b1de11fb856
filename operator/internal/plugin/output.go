package plugin

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"
)

// Output formats.
const (
	outputTable = ""
	outputWide  = "wide"
	outputJSON  = "json"
	outputYAML  = "yaml"
	outputName  = "name"
)

// checkOutput fails unless format is one of allowed ("" is the table).
func checkOutput(format string, allowed ...string) error {
	for _, a := range allowed {
		if format == a {
			return nil
		}
	}
	var names []string
	for _, a := range allowed {
		if a != outputTable {
			names = append(names, a)
		}
	}
	return fmt.Errorf("unknown output format %q: -o takes one of %s (or nothing for a table)", format, strings.Join(names, ", "))
}

// printObject writes obj as JSON or YAML with its apiVersion and kind set
// and without managedFields, as kubectl get -o json|yaml does.
func printObject(w io.Writer, obj kruntime.Object, format string) error {
	if err := setKinds(obj); err != nil {
		return err
	}
	return printData(w, obj, format)
}

// printData writes any value as indented JSON or YAML.
func printData(w io.Writer, v any, format string) error {
	switch format {
	case outputJSON:
		b, err := json.MarshalIndent(v, "", "    ")
		if err != nil {
			return fmt.Errorf("encode JSON: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return err
	case outputYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode YAML: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q", format)
}

// setKinds sets apiVersion and kind on obj (and on the items of a list) and
// drops managedFields.
func setKinds(obj kruntime.Object) error {
	s, err := scheme()
	if err != nil {
		return err
	}
	gvk, err := apiutil.GVKForObject(obj, s)
	if err != nil {
		return err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	if m, ok := obj.(metav1.Object); ok {
		m.SetManagedFields(nil)
	}
	if strings.HasSuffix(gvk.Kind, "List") {
		items, err := meta.ExtractList(obj)
		if err != nil {
			return err
		}
		for _, it := range items {
			if err := setKinds(it); err != nil {
				return err
			}
		}
	}
	return nil
}

// table is a kubectl-style table: upper-case headers, columns separated by
// three spaces.
type table struct {
	w *tabwriter.Writer
}

func newTable(out io.Writer, headers ...string) *table {
	t := &table{w: tabwriter.NewWriter(out, 0, 8, 3, ' ', 0)}
	if len(headers) > 0 {
		t.row(headers...)
	}
	return t
}

func (t *table) row(cells ...string) {
	fmt.Fprintln(t.w, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.w.Flush() }

// age is a creation time as kubectl shows it ("5m", "3d2h").
func age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// orNone is s, or "<none>" when empty.
func orNone(s string) string {
	if s == "" {
		return "<none>"
	}
	return s
}
