package helmcheck

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// unknownFields walks a decoded object against the Go type it decodes into
// and lists the fields the type does not have, as "spec.containers[0].x".
// The JSON decoder stops reporting unknown fields at the first wrong type;
// this walk does not, so a wrong type never hides an unknown field.
func unknownFields(v any, t reflect.Type, path string, out *[]string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) || t.Implements(unmarshalerType) {
		return // custom decoding (quantities, int-or-string, times, raw)
	}
	switch t.Kind() {
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		fields := map[string]reflect.Type{}
		structFields(t, fields)
		for k, child := range m {
			ft, ok := fields[k]
			p := k
			if path != "" {
				p = path + "." + k
			}
			if !ok {
				*out = append(*out, p)
				continue
			}
			unknownFields(child, ft, p, out)
		}
	case reflect.Slice, reflect.Array:
		list, ok := v.([]any)
		if !ok {
			return
		}
		for i, child := range list {
			unknownFields(child, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		for k, child := range m {
			unknownFields(child, t.Elem(), path+"."+k, out)
		}
	}
}

// structFields maps JSON names to field types, following embedded and
// ",inline" structs as encoding/json does.
func structFields(t reflect.Type, out map[string]reflect.Type) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if (f.Anonymous && name == "") || strings.Contains(","+opts+",", ",inline,") {
			if ft.Kind() == reflect.Struct {
				structFields(ft, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
}
