package terraform

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// readState reads the stack's local state file.
func readState(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "state", "terraform.tfstate"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestApply_recordsTheStateItLeft: an apply (and an apply that finds its
// plan already in place) reports the lineage, serial and resources digest
// of the state it left, and they are what ReadStateRecord reads from the
// stored state file itself.
func TestApply_recordsTheStateItLeft(t *testing.T) {
	dir := t.TempDir()
	localStack(t, dir, "v1")
	first := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, Vars: map[string]string{"greeting": "hello"}})
	res, err := Apply(context.Background(), applyOpts(t, dir, first))
	if err != nil || res.State == nil {
		t.Fatalf("apply: %+v %v", res, err)
	}
	stored, err := ReadStateRecord(readState(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if *res.State != stored {
		t.Fatalf("the apply recorded %+v, the stored state is %+v", *res.State, stored)
	}
	if stored.Resources != 1 || stored.Serial == 0 || stored.Lineage == "" || !strings.HasPrefix(stored.ResourcesDigest, "sha256:") {
		t.Fatalf("state record %+v", stored)
	}

	// Found in place: the same state is reported.
	again, err := Apply(context.Background(), applyOpts(t, dir, first))
	if err != nil || !again.InPlace || again.State == nil || *again.State != stored {
		t.Fatalf("in place: %+v %v, want the state %+v", again, err, stored)
	}

	// Another input applied: new serial, new digest, same lineage.
	localStack(t, dir, "v2")
	second := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, Vars: map[string]string{"greeting": "hello"}})
	res, err = Apply(context.Background(), applyOpts(t, dir, second))
	if err != nil || res.State == nil {
		t.Fatalf("apply v2: %+v %v", res, err)
	}
	if res.State.Lineage != stored.Lineage || res.State.Serial <= stored.Serial || res.State.ResourcesDigest == stored.ResourcesDigest {
		t.Fatalf("after a change %+v, before %+v", *res.State, stored)
	}
}

// TestPlan_varsFromThePlanFile: a plan with VarsFromPlanFile uses the
// saved plan's variables, not the caller's, so it finds nothing to do
// against the state that plan produced.
func TestPlan_varsFromThePlanFile(t *testing.T) {
	dir := t.TempDir()
	localStack(t, dir, "v1")
	approved := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, Vars: map[string]string{"greeting": "hello"}})
	if _, err := Apply(context.Background(), applyOpts(t, dir, approved)); err != nil {
		t.Fatal(err)
	}
	res := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, VarsFromPlanFile: approved.PlanFile})
	if n := res.Report.Counts; n.Create+n.Update+n.Delete+n.Replace != 0 {
		t.Fatalf("a plan with the approved plan's variables changes %+v", n)
	}
	if v := res.Plan.Variables["greeting"]; v == nil || v.Value != "hello" {
		t.Fatalf("variables %+v", res.Plan.Variables)
	}
	// Today's variables would change it.
	other := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn, Vars: map[string]string{"greeting": "bye"}})
	if other.Report.Counts.Replace+other.Report.Counts.Update == 0 {
		t.Fatalf("the other variable changes nothing: %+v", other.Report.Counts)
	}
	_, err := Plan(context.Background(), PlanOptions{ExecOptions: ExecOptions{ExecPath: terraformPath(t)}, Dir: dir, Backend: BackendOwn,
		Vars: map[string]string{"greeting": "x"}, VarsFromPlanFile: approved.PlanFile})
	if err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("both kinds of variables: %v", err)
	}
}

func TestReadStateRecord(t *testing.T) {
	const state = `{"version":4,"terraform_version":"1.11.4","serial":7,"lineage":"l-1","outputs":{"o":{"value":"x","type":"string"}},
"resources":[
 {"mode":"data","type":"terraform_remote_state","name":"r","instances":[{"attributes":{"x":1}}]},
 {"module":"module.m[\"a\"]","mode":"managed","type":"terraform_data","name":"b","instances":[
   {"index_key":"k","attributes":{"input":{"value":"a","type":"string"},"id":"2"}},
   {"index_key":1,"attributes":{"id":"3","n":1.50}}]},
 {"mode":"managed","type":"terraform_data","name":"a","instances":[{"attributes":{"id":"1"}},{"deposed":"00aa","attributes":{"id":"0"}}]}
]}`
	rec, err := ReadStateRecord([]byte(state))
	if err != nil {
		t.Fatal(err)
	}
	if rec.Lineage != "l-1" || rec.Serial != 7 || rec.Resources != 4 {
		t.Fatalf("record %+v", rec)
	}
	same := func(s string) string {
		t.Helper()
		r, err := ReadStateRecord([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return r.ResourcesDigest
	}
	cases := []struct {
		name  string
		state string
		equal bool
	}{
		{"another serial, lineage, output and data source", strings.NewReplacer(`"serial":7`, `"serial":9`, `"l-1"`, `"l-2"`, `"value":"x"`, `"value":"y"`, `"x":1`, `"x":2`).Replace(state), true},
		{"keys in another order and other spacing", strings.Replace(state, `{"input":{"value":"a","type":"string"},"id":"2"}`, `{ "id": "2", "input": {"type": "string", "value": "a"} }`, 1), true},
		{"a changed attribute", strings.Replace(state, `"value":"a"`, `"value":"b"`, 1), false},
		{"a number written otherwise", strings.Replace(state, `1.50`, `1.5`, 1), false},
		{"an instance gone", strings.Replace(state, `,{"deposed":"00aa","attributes":{"id":"0"}}`, ``, 1), false},
		{"another index", strings.Replace(state, `"index_key":1,`, `"index_key":2,`, 1), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := same(tc.state) == rec.ResourcesDigest; got != tc.equal {
				t.Fatalf("same digest %v, want %v", got, tc.equal)
			}
		})
	}
	for _, bad := range []string{``, `{}`, `{"version":3,"serial":1,"lineage":"x"}`, `{"version":4,"lineage":"x"}`, `{"version":4,"serial":1}`,
		`{"version":4,"serial":1,"lineage":"x","resources":[{"mode":"managed","type":"t","name":"n","instances":[{"attributes":{}},{"attributes":{}}]}]}`} {
		if _, err := ReadStateRecord([]byte(bad)); err == nil {
			t.Errorf("%q: want an error", bad)
		}
	}
}

func FuzzReadStateRecord(f *testing.F) {
	f.Add([]byte(`{"version":4,"serial":1,"lineage":"x","resources":[{"mode":"managed","type":"t","name":"n","instances":[{"index_key":0,"attributes":{"a":[1,{"b":null}]}}]}]}`))
	f.Add([]byte(`{"version":4,"serial":1,"lineage":"x","resources":[{"mode":"managed","type":"t","name":"n","instances":[{"attributes_flat":{"a":"1"}}]}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ReadStateRecord(b)
		if err != nil {
			return
		}
		again, err := ReadStateRecord(b)
		if err != nil || again != r {
			t.Fatalf("not deterministic: %+v %+v %v", r, again, err)
		}
	})
}
