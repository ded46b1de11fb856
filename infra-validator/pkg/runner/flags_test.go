package runner

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-logr/logr"
)

// The syncer and the operator build their runner from the same flags: only
// the variables --terraform-env names reach terraform, a name that is not
// set is no error, and a bad port list is refused with the flag's name.
func TestFlags_buildPassesOnlyTheNamedEnvironment(t *testing.T) {
	t.Setenv("SLUICE_TEST_PROVIDER_TOKEN", "p")
	t.Setenv("SLUICE_TEST_OTHER", "o")
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("t\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f := Flags{Runner: "http://127.0.0.1:1", TokenFile: token, PassEnv: " SLUICE_TEST_PROVIDER_TOKEN, SLUICE_TEST_UNSET,"}
	run, env, err := f.Build(logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := run.(*Remote); !ok {
		t.Fatalf("runner %T, want the runner workload", run)
	}
	if len(env) != 1 || env["SLUICE_TEST_PROVIDER_TOKEN"] != "p" {
		t.Fatalf("env %v", env)
	}

	f.AllowPorts = "443,x"
	if _, _, err := f.Build(logr.Discard()); err == nil || !strings.Contains(err.Error(), "--terraform-allow-ports") {
		t.Fatalf("bad ports: %v", err)
	}
}
