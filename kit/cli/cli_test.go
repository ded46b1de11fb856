package cli

import (
	"bytes"
	"flag"
	"strings"
	"testing"
)

func parse(t *testing.T, args ...string) *Common {
	t.Helper()
	c := &Common{Binary: "tool"}
	fs := flag.NewFlagSet("tool", flag.ContinueOnError)
	c.Bind(fs, "Namespaces to watch.")
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestStart_versionPrintsTheBuildAndIsDone(t *testing.T) {
	var out bytes.Buffer
	if _, done := parse(t, "--version").Start(&out); !done {
		t.Fatal("--version did not end the start")
	}
	if !strings.HasPrefix(out.String(), "tool ") {
		t.Fatalf("printed %q, want the binary's build line", out.String())
	}
}

func TestNamespaces_emptyIsAllAndCommasSplit(t *testing.T) {
	if got := parse(t).Namespaces(); got != nil {
		t.Fatalf("no --namespaces = %v, want nil (all)", got)
	}
	if got := parse(t, "--namespaces", "a,b").Namespaces(); len(got) != 2 || got[0] != "a" || got[1] != "b" {
		t.Fatalf("--namespaces a,b = %v", got)
	}
}
