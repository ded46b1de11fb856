package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sluice-gitops/sluice/infra-validator/internal/benchdata"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// referenceValue is what ParseJSON must equal: encoding/json with
// UseNumber, then ast.InterfaceToValue. ok is false when encoding/json
// refuses the input (or it has trailing data).
func referenceValue(data []byte) (any, ast.Value, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, nil, false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, nil, false
	}
	val, err := ast.InterfaceToValue(v)
	if err != nil {
		return nil, nil, false
	}
	return v, val, true
}

func checkParseJSON(t *testing.T, data []byte) {
	t.Helper()
	_, want, wantOK := referenceValue(data)
	got, ok := ParseJSON(data)
	if !wantOK {
		if ok {
			t.Fatalf("ParseJSON accepted %q, which encoding/json refuses", data)
		}
		return
	}
	// ParseJSON may decline input encoding/json accepts (the caller then
	// uses encoding/json); when it accepts, the value must be equal.
	if ok && ast.Compare(got, want) != 0 {
		t.Fatalf("ParseJSON(%q) = %v, want %v", data, got, want)
	}
}

// TestParseJSONMatchesEncodingJSON checks the direct parser against
// encoding/json + ast.InterfaceToValue on the plan fixtures, a generated
// plan and awkward documents.
func TestParseJSONMatchesEncodingJSON(t *testing.T) {
	files, _ := filepath.Glob("../terraform/testdata/aws_*.json")
	if len(files) == 0 {
		t.Fatal("no plan fixtures found")
	}
	inputs := [][]byte{benchdata.BigPlan(50)}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		inputs = append(inputs, data)
	}
	for _, data := range inputs {
		got, ok := ParseJSON(data)
		if !ok {
			t.Fatalf("ParseJSON declined a plan fixture")
		}
		_, want, _ := referenceValue(data)
		if ast.Compare(got, want) != 0 {
			t.Fatalf("ParseJSON differs from encoding/json on a plan fixture")
		}
	}
	for _, s := range []string{
		`{"a":1,"a":2}`, `{"n":[0,-0,1.5e3,-12.25E-2,12345678901234567890123]}`, `"\u00e9\ud83d\ude00 \ud800 \n\"\\"`,
		"\"\xff invalid\"", "\"é\"", `[true,false,null,{},[]]`, ` {"x" : [ 1 , 2 ] } `,
		`{"a":1,"\u0061":2}`, `[{"k":"v"},{"k":"v","w":"v"},"v",{"k":["v","v"]}]`, manyKeys(20, "k3"), manyKeys(20, ""),
		`{"a":1} x`, `{"a":}`, `[1,]`, `01`, `1.`, `-`, `1e`, `"\x01"`, "\"tab\there\"", `{"a" 1}`, ``, `nul`,
	} {
		checkParseJSON(t, []byte(s))
	}
}

// manyKeys is an object of n keys k0..k(n-1), plus dup repeated at the end
// when set: big enough for the map-based duplicate check.
func manyKeys(n int, dup string) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		fmt.Fprintf(&b, "%q:%d,", fmt.Sprintf("k%d", i), i)
	}
	if dup != "" {
		fmt.Fprintf(&b, "%q:\"dup\",", dup)
	}
	b.WriteString(`"last":true}`)
	return b.String()
}

// FuzzParseJSON compares the direct parser with encoding/json.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"a":[1,2.5,"x"],"b":{"c":null}}`, `"\ud83d\ude00"`, `[-0.0e+1]`, `{"a":1,"a":true}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) { checkParseJSON(t, data) })
}

// TestRedactASTMatchesAny checks that Redact finds the same secrets in an
// input given as an ast.Value as in the same input decoded to Go values.
func TestRedactASTMatchesAny(t *testing.T) {
	data := []byte(`{"resource_changes":[{"address":"aws_db_instance.db","change":{
		"before":{"password":"old-password-1"},"before_sensitive":{"password":true},
		"after":{"password":"new-password-2","conn":"postgres://u:hunter22@db/x","list":["sens-item-0","plain-item"]},
		"after_sensitive":{"password":true,"list":[true,false]}}},
		{"kind":"Secret","data":{"k":"c2VjcmV0LXZhbHVl"}},{"api_key":"abcdef123456"}]}`)
	goValue, astValue, ok := referenceValue(data)
	if !ok {
		t.Fatal("bad test input")
	}
	parsed, ok := ParseJSON(data)
	if !ok || ast.Compare(parsed, astValue) != 0 {
		t.Fatal("ParseJSON differs on the test input")
	}
	msg := "old-password-1 new-password-2 hunter22 sens-item-0 plain-item c2VjcmV0LXZhbHVl abcdef123456"
	a := Redact([]report.Finding{{Message: msg}}, goValue)
	b := Redact([]report.Finding{{Message: msg}}, parsed)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("redaction differs:\n any: %q\n ast: %q", a[0].Message, b[0].Message)
	}
	if a[0].Message == msg {
		t.Fatal("nothing was redacted")
	}
	c := newCollector()
	c.collect(parsed, "", false)
	var got []string
	for s := range c.set {
		got = append(got, s)
	}
	sort.Strings(got)
	if len(got) < 5 {
		t.Fatalf("secrets found: %q", got)
	}
}
