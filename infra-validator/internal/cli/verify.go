package cli

import (
	"context"
	"flag"
	"fmt"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
)

// runVerify runs the Rego unit tests of policy folders, as conftest verify
// does: `infra-validator verify [DIR]` (default ./policy, or --policy).
// Exit 0 when every test passes, 1 when one fails, 2 when the policies do
// not load.
func runVerify(ctx context.Context, e env, args []string) (int, error) {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	var policies, data, namespaces stringList
	var noDefaults bool
	fs.Var(&policies, "policy", "policy file or folder (repeatable)")
	fs.Var(&policies, "p", "shorthand for --policy")
	fs.Var(&data, "data", "data file or folder (repeatable)")
	fs.Var(&data, "d", "shorthand for --data")
	fs.Var(&namespaces, "namespace", "run only the tests of these packages (repeatable, globs)")
	fs.Var(&namespaces, "n", "shorthand for --namespace")
	fs.BoolVar(&noDefaults, "no-default-policies", false, "leave out the embedded default policies")
	dirs, err := parse(fs, args)
	if err != nil {
		return 0, err
	}
	policies = append(policies, dirs...)
	if len(policies) == 0 {
		policies = stringList{"policy"}
	}
	results, err := policy.Verify(ctx, policy.Options{PolicyDirs: policies, DataFiles: data, Namespaces: namespaces, NoDefaults: noDefaults})
	if err != nil {
		return 0, err
	}
	passed, failed, skipped := 0, 0, 0
	for _, r := range results {
		switch {
		case r.Skipped:
			skipped++
			fmt.Fprintf(e.stdout, "SKIP - %s - %s\n", r.File, r.Name)
		case r.Passed:
			passed++
		default:
			failed++
			if r.Error != nil {
				fmt.Fprintf(e.stdout, "FAIL - %s - %s: %v\n", r.File, r.Name, r.Error)
			} else {
				fmt.Fprintf(e.stdout, "FAIL - %s - %s\n", r.File, r.Name)
			}
		}
	}
	fmt.Fprintf(e.stdout, "\n%s, %d passed, 0 warnings, %s, 0 exceptions", plural(len(results), "test"), passed, plural(failed, "failure"))
	if skipped > 0 {
		fmt.Fprintf(e.stdout, ", %d skipped", skipped)
	}
	fmt.Fprintln(e.stdout)
	if failed > 0 {
		return ExitFailed, nil
	}
	return ExitOK, nil
}

// plural is "1 test" or "2 tests", as conftest's summary line writes them.
func plural(n int, word string) string {
	if n == 1 {
		return fmt.Sprintf("%d %s", n, word)
	}
	return fmt.Sprintf("%d %ss", n, word)
}
