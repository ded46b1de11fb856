package terraform

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	tfjson "github.com/hashicorp/terraform-json"

	"github.com/sluice-gitops/sluice/infra-validator/internal/benchdata"
)

// stdEncode is the reference: encoding/json's Encoder with HTML escaping off,
// as the planDigest was first defined.
func stdEncode(t testing.TB, v any) ([]byte, error) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	err := enc.Encode(v)
	return buf.Bytes(), err
}

func checkSameAsStd(t testing.TB, c canonicalChange) {
	t.Helper()
	want, wantErr := stdEncode(t, c)
	enc := newCanonicalEncoder()
	gotErr := enc.change(&c)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("error mismatch: encoding/json %v, canonical encoder %v", wantErr, gotErr)
	}
	if wantErr == nil && !bytes.Equal(enc.buf, want) {
		t.Fatalf("canonical encoding differs from encoding/json\n got: %s\nwant: %s", enc.buf, want)
	}
	o := canonicalOutput{Name: c.Address, Actions: c.Actions, Before: c.Before, After: c.After,
		AfterUnknown: c.AfterUnknown, BeforeSensitive: c.BeforeSensitive, AfterSensitive: c.AfterSensitive}
	want, wantErr = stdEncode(t, o)
	gotErr = enc.output(&o)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("output error mismatch: encoding/json %v, canonical encoder %v", wantErr, gotErr)
	}
	if wantErr == nil && !bytes.Equal(enc.buf, want) {
		t.Fatalf("canonical output encoding differs from encoding/json\n got: %s\nwant: %s", enc.buf, want)
	}
}

func changesOf(t testing.TB, plan *tfjson.Plan) []canonicalChange {
	var out []canonicalChange
	for _, rc := range plan.ResourceChanges {
		c := rc.Change
		out = append(out, canonicalChange{
			Address: rc.Address, PreviousAddress: rc.PreviousAddress, ModuleAddress: rc.ModuleAddress,
			Mode: string(rc.Mode), Type: rc.Type, Name: rc.Name, Index: rc.Index,
			ProviderName: rc.ProviderName, Deposed: rc.DeposedKey,
			Actions: actionStrings(c.Actions), Before: c.Before, After: c.After,
			AfterUnknown: c.AfterUnknown, BeforeSensitive: c.BeforeSensitive, AfterSensitive: c.AfterSensitive,
			Importing: c.Importing,
		})
	}
	return out
}

// TestCanonicalEncoderMatchesEncodingJSON pins the planDigest's canonical
// form: the reflection-free encoder writes exactly encoding/json's bytes for
// the fixture plans, a generated large plan and awkward values.
func TestCanonicalEncoderMatchesEncodingJSON(t *testing.T) {
	files, err := filepath.Glob("testdata/aws_*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v", err)
	}
	inputs := [][]byte{benchdata.BigPlan(40)}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, data)
	}
	n := 0
	for _, data := range inputs {
		plan, err := ReadPlan(data)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range changesOf(t, plan) {
			checkSameAsStd(t, c)
			n++
		}
	}
	if n < 40 {
		t.Fatalf("only %d changes compared", n)
	}

	odd := []any{
		"quote \" backslash \\ slash / <html> & amp",
		"controls \x00\x01\b\f\n\r\t\x1f\x7f",
		"invalid utf-8 \xff\xfe and a lone \xc3",
		"line separators \u2028 \u2029, emoji \U0001F600, accents é",
		json.Number(""), json.Number("-0.5e+10"), json.Number("1E3"), json.Number("007"), json.Number("1.e3"),
		[]any(nil), map[string]any(nil), []any{}, map[string]any{},
		map[string]any{"b": []any{true, false, nil}, "a": map[string]any{"z\n": "\u2028", "é": json.Number("1")}, "": "empty key"},
		3.25, int64(7), []string{"typed"}, map[string]string{"k": "v"},
	}
	for _, v := range odd {
		checkSameAsStd(t, canonicalChange{Address: "x.y", Actions: []string{"create"}, Index: v, After: v, Before: v})
	}
	checkSameAsStd(t, canonicalChange{Address: "a\u2028", Actions: nil, Importing: &tfjson.Importing{ID: "i-<1>"}, Deposed: "d\"", PreviousAddress: "p", ModuleAddress: "module.m"})
}

// FuzzCanonicalEncoder compares the canonical encoder with encoding/json on
// arbitrary JSON values.
func FuzzCanonicalEncoder(f *testing.F) {
	for _, s := range []string{`{"a":1,"b":[true,null,"x\u2028"],"c":{"d":"\u0000<>&"}}`, `"\ud800"`, `[1.5e3,-0,"é"]`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		dec := json.NewDecoder(bytes.NewReader([]byte(s)))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return
		}
		checkSameAsStd(t, canonicalChange{Address: s, Actions: []string{s}, Index: v, After: v, AfterUnknown: v})
	})
}
