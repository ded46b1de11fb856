package policy

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"testing"
	"time"
)

// TestSplitByNamespace checks that parts hold whole namespaces, every rule
// once, in order.
func TestSplitByNamespace(t *testing.T) {
	rules := []ruleRef{{namespace: "a", name: "deny"}, {namespace: "a", name: "warn"}, {namespace: "b", name: "deny"}, {namespace: "c", name: "deny"}}
	parts := splitByNamespace(rules, 2)
	want := [][]ruleRef{{rules[0], rules[1], rules[3]}, {rules[2]}}
	if !reflect.DeepEqual(parts, want) {
		t.Fatalf("parts = %v, want %v", parts, want)
	}
	if splitByNamespace(rules[:2], 2) != nil || splitByNamespace(rules, 1) != nil {
		t.Fatal("one namespace or one core must not be split")
	}
}

// TestImbalanced: a measurement is due only when the slowest part took at
// least minImbalanced and more than imbalance times the fastest.
func TestImbalanced(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		times []time.Duration
		want  bool
	}{
		{[]time.Duration{30 * ms, 10 * ms}, true},
		{[]time.Duration{10 * ms, 30 * ms}, true},
		{[]time.Duration{30 * ms, 25 * ms}, false},
		{[]time.Duration{4 * ms, 10 * time.Microsecond}, false},
		{[]time.Duration{minImbalanced, 0}, true},
	} {
		if got := imbalanced(tc.times); got != tc.want {
			t.Errorf("imbalanced(%v) = %v, want %v", tc.times, got, tc.want)
		}
	}
}

// TestDealByCost checks longest-processing-time-first dealing: the costly
// namespaces go to different parts and each part lists its rules in
// namespace order.
func TestDealByCost(t *testing.T) {
	sets := map[string]*querySet{}
	for _, ns := range []string{"a", "b", "c", "d"} {
		sets[ns] = &querySet{rules: []ruleRef{{namespace: ns, name: "deny"}, {namespace: ns, name: "warn"}}}
	}
	cost := map[string]time.Duration{"a": 10, "b": 1, "c": 9, "d": 2}
	parts := dealByCost(sets, []string{"a", "b", "c", "d"}, cost, 2)
	var got [][]string
	for _, p := range parts {
		var names []string
		for _, r := range p.rules {
			names = append(names, r.namespace+"/"+r.name)
		}
		got = append(got, names)
	}
	want := [][]string{{"a/deny", "a/warn", "b/deny", "b/warn"}, {"c/deny", "c/warn", "d/deny", "d/warn"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parts = %v, want %v", got, want)
	}
	// More parts than namespaces leaves none empty.
	if n := len(dealByCost(sets, []string{"a", "b"}, cost, 3)); n != 2 {
		t.Fatalf("%d parts for two namespaces", n)
	}
}

// TestBalancer_learnsCostsWithoutChangingFindings evaluates a set with one
// costly namespace and three cheap ones. After a measured evaluation the
// costly namespace has a part of its own, and every evaluation, measured or
// not, before and after, returns the same findings.
func TestBalancer_learnsCostsWithoutChangingFindings(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("heavy.rego", `package heavy
deny contains msg if {
	n := count([x | some i in numbers.range(1, 20000); x := i * input.factor])
	msg := sprintf("heavy %d", [n])
}
`)
	for _, ns := range []string{"light_a", "light_b", "light_c"} {
		write(ns+".rego", "package "+ns+"\nwarn contains \""+ns+"\" if input.factor > 1\n")
	}
	e := newEngine(t, Options{PolicyDirs: []string{dir}, AllNamespaces: true, NoDefaults: true})
	b := e.terraform.split
	if b == nil {
		t.Fatal("four namespaces on two cores were not split")
	}
	// The costs are the ones heavy.rego and the light rules have when the
	// machine is idle, so that a loaded machine cannot reorder them.
	b.elapsed = func(rules []ruleRef, _ time.Time) time.Duration {
		for _, r := range rules {
			if r.namespace == "heavy" {
				return 20 * time.Millisecond
			}
		}
		return 50 * time.Microsecond * time.Duration(len(rules))
	}
	ctx := context.Background()
	docs := []Document{{Path: "in.json", Value: map[string]any{"factor": 2}}}
	first, err := e.Eval(ctx, KindTerraform, docs)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 4 {
		t.Fatalf("findings = %v", first)
	}

	b.mu.Lock()
	b.measureNext = true
	b.mu.Unlock()
	measured, err := e.Eval(ctx, KindTerraform, docs)
	if err != nil {
		t.Fatal(err)
	}
	after, err := e.Eval(ctx, KindTerraform, docs)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, measured) || !reflect.DeepEqual(first, after) {
		t.Fatalf("findings changed:\n first    %v\n measured %v\n after    %v", first, measured, after)
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byNamespace == nil {
		t.Fatal("the costs were not measured")
	}
	for _, p := range b.parts {
		for _, r := range p.rules {
			if r.namespace == "heavy" && len(p.rules) != 1 {
				t.Fatalf("heavy shares a part: %v", p.rules)
			}
		}
	}
}

// TestBalancer_measuresOnlyImbalancedParts: cheap evaluations never trigger
// a measurement, however uneven their parts.
func TestBalancer_measuresOnlyImbalancedParts(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	dir := t.TempDir()
	for _, ns := range []string{"a", "b", "c"} {
		if err := os.WriteFile(filepath.Join(dir, ns+".rego"), []byte("package "+ns+"\ndeny contains \"x\" if input.x\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := newEngine(t, Options{PolicyDirs: []string{dir}, AllNamespaces: true, NoDefaults: true})
	// Each part takes a different, sub-millisecond time, as on an idle
	// machine; a loaded one must not make the test measure.
	e.terraform.split.elapsed = func(rules []ruleRef, _ time.Time) time.Duration {
		return 100 * time.Microsecond * time.Duration(len(rules)*len(rules))
	}
	for range 3 * remeasureAfter {
		if _, err := e.Eval(context.Background(), KindTerraform, []Document{{Path: "in.json", Value: map[string]any{"x": true}}}); err != nil {
			t.Fatal(err)
		}
	}
	b := e.terraform.split
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.byNamespace != nil || b.measureNext {
		t.Fatal("a sub-millisecond evaluation was measured")
	}
}
