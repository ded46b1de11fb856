// Command images builds Sluice's container images without Docker or a
// registry: reproducible FROM-scratch images in an OCI layout, docker-archive
// tarballs that `ctr images import` loads, SPDX SBOMs from the binaries'
// build information, and cosign-format signatures. See README.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// UsageError reports a command line the tool cannot run.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

const usage = `usage: images <verb> [flags]

verbs:
  build    one image from files: -o out.tar -t ref [-entrypoint "cmd args"] [-user uid:gid] [-arch amd64|arm64] /dst=src ...
  release  Sluice's images, SBOMs and signatures into an OCI layout and per-arch tarballs
  verify   signatures, SBOMs and the chart's default references against a layout
  push     every reference of a layout to a registry
`

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		var ue *UsageError
		if errors.As(err, &ue) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// run dispatches a verb.
func run(args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return &UsageError{Msg: "no verb\n" + usage}
	}
	switch args[0] {
	case "build":
		return runBuild(args[1:], stdout, stderr)
	case "release":
		return runRelease(args[1:], stdout, stderr)
	case "verify":
		return runVerify(args[1:], stdout, stderr)
	case "push":
		return runPush(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	return &UsageError{Msg: fmt.Sprintf("unknown verb %q\n%s", args[0], usage)}
}

// listFlag collects a repeatable flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// newFlagSet returns a flag set that reports errors instead of exiting.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	return fs
}

// parseFlags parses and wraps flag errors as usage errors.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return &UsageError{Msg: "help requested"}
		}
		return &UsageError{Msg: err.Error()}
	}
	return nil
}
