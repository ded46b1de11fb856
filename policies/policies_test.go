package policies

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/format"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
	"sigs.k8s.io/yaml"
)

// loadAll parses every embedded module, tests included.
func loadAll(t *testing.T) map[string]*ast.Module {
	t.Helper()
	res, err := loader.NewFileLoader().WithFS(FS()).WithRegoVersion(ast.RegoV1).
		Filtered([]string{"rego"}, nil)
	if err != nil {
		t.Fatalf("load embedded policies: %v", err)
	}
	mods := res.ParsedModules()
	if len(mods) == 0 {
		t.Fatal("no embedded policies found")
	}
	return mods
}

func defaultData(t *testing.T) map[string]any {
	t.Helper()
	raw, err := fs.ReadFile(FS(), DefaultDataPath)
	if err != nil {
		t.Fatalf("read default data: %v", err)
	}
	var data map[string]any
	if err := yaml.Unmarshal(raw, &data); err != nil {
		t.Fatalf("parse default data: %v", err)
	}
	return data
}

// TestRegoPolicies runs every Rego unit test of the default policies through
// OPA's tester, with the default data in the store.
func TestRegoPolicies(t *testing.T) {
	ctx := context.Background()
	mods := loadAll(t)
	store := inmem.NewFromObject(defaultData(t))
	runner := tester.NewRunner().SetStore(store).SetModules(mods).
		SetCompiler(ast.NewCompiler().WithEnablePrintStatements(true)).CapturePrintOutput(true).RaiseBuiltinErrors(true)
	txn, err := store.NewTransaction(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Abort(ctx, txn)
	ch, err := runner.RunTests(ctx, txn)
	if err != nil {
		t.Fatalf("run rego tests: %v", err)
	}
	n := 0
	for res := range ch {
		n++
		name := res.Package + "." + res.Name
		t.Run(strings.TrimPrefix(name, "data."), func(t *testing.T) {
			if res.Error != nil {
				t.Fatalf("%s: error: %v\n%s", res.Location, res.Error, res.Output)
			}
			if res.Fail {
				t.Fatalf("%s: failed\n%s", res.Location, res.Output)
			}
		})
	}
	if n == 0 {
		t.Fatal("no rego tests ran")
	}
}

// TestEveryPolicyHasPassAndFailTests: each package with deny/warn/unverifiable
// rules has a <package>_test package with a test_pass_* and a test_fail_* rule.
func TestEveryPolicyHasPassAndFailTests(t *testing.T) {
	mods := loadAll(t)
	tests := map[string][]string{}
	policies := map[string]bool{}
	for _, m := range mods {
		pkg := strings.TrimPrefix(m.Package.Path.String(), "data.")
		for _, r := range m.Rules {
			name := r.Head.Name.String()
			if name == "" && len(r.Head.Reference) > 0 {
				name = r.Head.Reference[0].Value.(ast.Var).String()
			}
			switch {
			case strings.HasSuffix(pkg, "_test") && strings.HasPrefix(name, "test_"):
				tests[strings.TrimSuffix(pkg, "_test")] = append(tests[strings.TrimSuffix(pkg, "_test")], name)
			case name == "deny" || name == "warn" || name == "violation" || name == "unverifiable":
				policies[pkg] = true
			}
		}
	}
	if len(policies) < 10 {
		t.Fatalf("expected the default policy packages, found %d", len(policies))
	}
	for pkg := range policies {
		var pass, fail bool
		for _, name := range tests[pkg] {
			pass = pass || strings.HasPrefix(name, "test_pass")
			fail = fail || strings.HasPrefix(name, "test_fail")
		}
		if !pass || !fail {
			t.Errorf("policy %s needs a test_pass_* and a test_fail_* test in package %s_test (has %v)", pkg, pkg, tests[pkg])
		}
	}
}

// TestPoliciesAreOPAFormatted: every embedded Rego file is as `opa fmt`
// (Rego v1) writes it.
func TestPoliciesAreOPAFormatted(t *testing.T) {
	n := 0
	err := fs.WalkDir(FS(), "rego", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".rego") {
			return err
		}
		src, err := fs.ReadFile(FS(), p)
		if err != nil {
			return err
		}
		n++
		got, err := format.SourceWithOpts(p, src, format.Opts{RegoVersion: ast.RegoV1})
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		if string(got) != string(src) {
			t.Errorf("%s is not opa-fmt formatted", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 20 {
		t.Fatalf("checked only %d Rego files", n)
	}
}
