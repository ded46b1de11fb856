package policy

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"github.com/open-policy-agent/opa/v1/tester"
)

// TestResult is the outcome of one Rego unit test (a test_ rule).
type TestResult struct {
	// File is the policy file that holds the test.
	File string
	// Name is the test's full name, data.<package>.<rule>.
	Name string
	// Passed, Skipped (a todo_test_ rule) or failed; Error says why a test
	// could not be evaluated.
	Passed, Skipped bool
	Error           error
}

// Verify runs the Rego unit tests (test_ rules) of the caller's policies,
// as conftest verify does: the policies and their tests compile together
// with the data files, conftest's builtins are provided, and each test
// passes when its rule is true. opts.Namespaces (globs) keeps the tests of
// matching packages; empty keeps all. The embedded default policies load
// too (unless NoDefaults), so a test may use their helpers; their tests are
// not run. Results are sorted by file, then name.
func Verify(ctx context.Context, opts Options) ([]TestResult, error) {
	if len(opts.PolicyDirs) == 0 {
		return nil, &CompileError{Problems: []Problem{{Message: "give a policy folder to verify"}}}
	}
	in, err := loadInputs(opts)
	if err != nil {
		return nil, err
	}
	modules, defaultFiles := in.modules, in.defaultFiles
	// A compiler of its own: the tester adds stages to the one it is given.
	runner := tester.NewRunner().SetCompiler(in.newCompiler()).SetStore(inmem.NewFromObject(in.data)).
		SetModules(modules).AddCustomBuiltins(in.builtins.testerBuiltins()).EnableTracing(false)
	ch, err := runner.RunTests(ctx, nil)
	if err != nil {
		var astErrs ast.Errors
		if errors.As(err, &astErrs) {
			return nil, astError(astErrs)
		}
		return nil, fmt.Errorf("run policy tests: %w", err)
	}
	userFiles := map[string]bool{}
	for name, m := range modules {
		if !defaultFiles[name] && m.Package.Location != nil {
			userFiles[m.Package.Location.File] = true
		}
	}
	var out []TestResult
	for r := range ch {
		if r.Location == nil || !userFiles[r.Location.File] {
			continue
		}
		ns := strings.TrimPrefix(r.Package, "data.")
		if len(opts.Namespaces) > 0 {
			keep := false
			for _, p := range opts.Namespaces {
				if ok, err := path.Match(p, ns); err != nil {
					return nil, &CompileError{Problems: []Problem{{Message: fmt.Sprintf("bad --namespace pattern %q: %v", p, err)}}}
				} else if ok {
					keep = true
					break
				}
			}
			if !keep {
				continue
			}
		}
		res := TestResult{Name: r.Package + "." + r.Name, Passed: r.Pass(), Skipped: r.Skip, Error: r.Error}
		if r.Location != nil {
			res.File = r.Location.File
		}
		out = append(out, res)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].File != out[j].File {
			return out[i].File < out[j].File
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}
