// Package cli implements the infra-validator command line. main calls Run;
// tests call it in-process.
//
// Exit codes: 0 clean, 1 policy failures (at the --fail-on threshold), 2 bad
// input or usage.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/policy"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/validate"
	"github.com/sluice-gitops/sluice/kit/version"
)

// Exit codes.
const (
	ExitOK       = 0
	ExitFailed   = 1
	ExitBadUsage = 2
)

// binary is the command's name in messages and build information.
const binary = "infra-validator"

const usage = `infra-validator checks infrastructure changes against Rego policy.

Usage:
  infra-validator terraform PLAN.json [flags]            check plan JSON (terraform show -json)
  infra-validator terraform --plan-file F --dir D [flags] check a binary plan of stack D
  infra-validator terraform --dir D [--var k=v] [--workspace W] [flags]
                                                        plan stack D (stateless) and check it
  infra-validator helm CHART [-f values.yaml]... [--release R] [--namespace N] [--kube-version V] [flags]
                                                        render and check a chart (--namespace is the
                                                        release's; use --policy-namespace here)
  infra-validator kubernetes FILE... [flags]             check rendered manifests (YAML/JSON)
  infra-validator check SERVICE_DIR [--repo ROOT] [--env E] [--no-terraform] [flags]
                                                        check every environment of a service
  infra-validator runner serve [--bind-address :8090] [--work-dir D] [--terraform-path P]
                 [--plugin-cache-dir D] [--allow-ports 443,...] [--max-runs N]
                                                        run terraform jobs for the syncer and operator
                                                        (bearer token from $SLUICE_RUNNER_TOKEN)
  infra-validator verify [DIR]... [--data F] [--namespace NS]
                                                        run the Rego unit tests of policy folders
                                                        (conftest verify; default ./policy)
  infra-validator version

Policy flags (all commands):
  --policy DIR            extra policy file or folder, repeatable (conftest --policy)
  --data FILE             data file or folder, repeatable (conftest --data)
  --namespace NS          namespace of your policies, repeatable, globs allowed (default main);
                          also --policy-namespace
  --all-namespaces        evaluate every namespace of your policies
  --combine               evaluate your policies once over all documents (conftest --combine)
  --no-default-policies   leave out the embedded Sluice policies
Output flags:
  --output text|json|sarif   (default text; colour only on a terminal, never with NO_COLOR)
  --fail-on deny|warn        lowest severity that exits 1 (default deny)

Exit codes: 0 clean, 1 policy failures, 2 bad input or usage.
`

// usageError is a problem with the command line.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return &usageError{msg: fmt.Sprintf(format, args...)} }

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	*s = append(*s, v)
	return nil
}

// common are the flags every checking command takes.
type common struct {
	policies, data, namespaces stringList
	policyNamespaces           stringList
	allNamespaces, combine     bool
	noDefaults                 bool
	output, failOn             string
}

func (c *common) register(fs *flag.FlagSet) {
	c.registerExcept(fs, "")
}

// registerExcept registers the common flags but the named one (the helm
// command uses --namespace for the release namespace). --policy-namespace
// is an alias of --namespace everywhere.
func (c *common) registerExcept(fs *flag.FlagSet, except string) {
	fs.Var(&c.policies, "policy", "policy file or folder (repeatable)")
	fs.Var(&c.policies, "p", "shorthand for --policy")
	fs.Var(&c.data, "data", "data file or folder (repeatable)")
	fs.Var(&c.data, "d", "shorthand for --data")
	if except != "namespace" {
		fs.Var(&c.namespaces, "namespace", "policy namespace (repeatable, globs)")
		fs.Var(&c.namespaces, "policy-namespace", "policy namespace (repeatable, globs)")
	} else {
		fs.Var(&c.policyNamespaces, "policy-namespace", "policy namespace (repeatable, globs)")
	}
	fs.BoolVar(&c.allNamespaces, "all-namespaces", false, "evaluate every namespace")
	fs.BoolVar(&c.combine, "combine", false, "evaluate your policies once over all documents")
	fs.BoolVar(&c.noDefaults, "no-default-policies", false, "leave out the embedded default policies")
	fs.StringVar(&c.output, "output", "text", "text, json or sarif")
	fs.StringVar(&c.output, "o", "text", "shorthand for --output")
	fs.StringVar(&c.failOn, "fail-on", "deny", "deny or warn")
}

// options turns the flags into validator options; namespace is passed
// separately because the helm command also has a --namespace (the release's).
// kinds limits the default policies to what the command checks.
func (c *common) options(namespaces []string, kinds ...policy.Kind) validate.Options {
	return validate.Options{Policy: policy.Options{
		Kinds:         kinds,
		PolicyDirs:    c.policies,
		DataFiles:     c.data,
		Namespaces:    namespaces,
		AllNamespaces: c.allNamespaces,
		Combine:       c.combine,
		NoDefaults:    c.noDefaults,
	}}
}

// env is what a command needs from the process.
type env struct {
	stdout, stderr io.Writer
	color          bool
}

// Run runs the command line args (without the program name) and returns the
// exit code. It never panics on bad input: a panic in a check is reported as
// an internal error with exit code 2.
func Run(args []string, stdout, stderr io.Writer) (code int) {
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(stderr, "%s: internal error: %v\n", binary, r)
			code = ExitBadUsage
		}
	}()
	e := env{stdout: stdout, stderr: stderr, color: isTerminal(stdout) && os.Getenv("NO_COLOR") == ""}
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return ExitBadUsage
	}
	ctx := context.Background()
	var err error
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "terraform", "tf":
		code, err = runTerraform(ctx, e, rest)
	case "helm":
		code, err = runHelm(ctx, e, rest)
	case "check":
		code, err = runCheck(ctx, e, rest)
	case "kubernetes", "k8s":
		code, err = runKubernetes(ctx, e, rest)
	case "runner":
		code, err = runRunner(ctx, e, rest)
	case "verify":
		code, err = runVerify(ctx, e, rest)
	case "version", "--version", "-version":
		fmt.Fprintln(stdout, version.String(binary))
		return ExitOK
	case "help", "-h", "--help", "-help":
		fmt.Fprint(stdout, usage)
		return ExitOK
	default:
		err = usagef("unknown command %q", cmd)
	}
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "%s: %v\nRun '%s help' for usage.\n", binary, err, binary)
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", binary, err)
		}
		return ExitBadUsage
	}
	return code
}

// parse parses flags and positional arguments in any order (flag stops at the
// first positional argument; this continues after it). "--" ends flags.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	fs.SetOutput(io.Discard)
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, usagef("%s: see '%s help'", fs.Name(), binary)
			}
			return nil, usagef("%s: %v", fs.Name(), err)
		}
		args = fs.Args()
		if len(args) == 0 {
			return positional, nil
		}
		if args[0] == "--" {
			return append(positional, args[1:]...), nil
		}
		positional = append(positional, args[0])
		args = args[1:]
	}
}

// finish writes the report and returns the exit code for --fail-on.
func finish(e env, c *common, rep *report.Report) (int, error) {
	format, err := report.ParseFormat(c.output)
	if err != nil {
		return 0, &usageError{msg: err.Error()}
	}
	failOn, err := parseFailOn(c.failOn)
	if err != nil {
		return 0, err
	}
	rep.Tool = binary
	rep.Version = version.Version
	if err := rep.Write(e.stdout, format, e.color && format == report.FormatText); err != nil {
		return 0, fmt.Errorf("write report: %w", err)
	}
	if failOn.Fails(rep.Findings()) {
		return ExitFailed, nil
	}
	return ExitOK, nil
}

func parseFailOn(s string) (report.FailOn, error) {
	switch f := report.FailOn(s); f {
	case report.FailOnDeny, report.FailOnWarn:
		return f, nil
	}
	return "", usagef("--fail-on must be deny or warn, not %q", s)
}

// checkCommon validates the output flags before any work is done.
func checkCommon(c *common) error {
	if _, err := report.ParseFormat(c.output); err != nil {
		return &usageError{msg: err.Error()}
	}
	_, err := parseFailOn(c.failOn)
	return err
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
