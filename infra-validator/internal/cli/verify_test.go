package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const examples = "testdata/conftest-examples"

// TestConftestExamples: conftest v0.71.1's own examples give what conftest
// documents for them (testdata/conftest-examples/README.md), through
// infra-validator verify and kubernetes.
func TestConftestExamples(t *testing.T) {
	x := examples
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		contains []string
	}{
		{"verify combine (parse_combined_config_files)", []string{"verify", "--policy", x + "/kubernetes/combine"}, ExitOK, []string{"2 tests, 2 passed, 0 warnings, 0 failures"}},
		{"verify a positional folder", []string{"verify", x + "/kubernetes/combine"}, ExitOK, []string{"2 tests, 2 passed"}},
		{"verify kubernetes", []string{"verify", "--policy", x + "/kubernetes/policy"}, ExitOK, []string{"4 tests, 4 passed"}},
		{"verify kubernetes --namespace main", []string{"verify", "--policy", x + "/kubernetes/policy", "--namespace", "main"}, ExitOK, []string{"4 tests, 4 passed"}},
		{"verify kubernetes --namespace ma*", []string{"verify", "--policy", x + "/kubernetes/policy", "--namespace", "ma*"}, ExitOK, []string{"4 tests, 4 passed"}},
		{"verify kubernetes --namespace doesnotexist", []string{"verify", "--policy", x + "/kubernetes/policy", "--namespace", "doesnotexist"}, ExitOK, []string{"0 tests, 0 passed"}},
		{"verify traefik fails", []string{"verify", "-p", x + "/traefik/policy"}, ExitFailed, []string{"FAIL - ", "data.main.test_ip_with_disallowed_ciphers", "1 test, 0 passed, 0 warnings, 1 failure"}},
		{"verify with data", []string{"verify", "-p", x + "/data/policy", "-d", x + "/data/exclusions"}, ExitOK, []string{"1 test, 1 passed, 0 warnings, 0 failures"}},
		{"test with data", []string{"kubernetes", "--no-default-policies", "-p", x + "/data/policy", "-d", x + "/data/exclusions", x + "/data/service.yaml"}, ExitFailed, []string{"Cannot expose port 22 on LoadBalancer"}},
		{"test --combine one file", []string{"kubernetes", "--no-default-policies", "--combine", "-p", x + "/kubernetes/combine", x + "/kubernetes/combine/combine.yaml"}, ExitFailed,
			[]string{"1 deny, 0 unverifiable, 0 warn", "Deployment 'goodbye-kubernetes' has no matching service (main/violation)"}},
		{"test --combine two files", []string{"kubernetes", "--no-default-policies", "--combine", "-p", x + "/kubernetes/combine", x + "/kubernetes/combine/deployment.yaml", x + "/kubernetes/combine/service.yaml"}, ExitFailed,
			[]string{"1 deny, 0 unverifiable, 0 warn", "Deployment 'goodbye-kubernetes' has no matching service (main/violation)"}},
		{"test kubernetes --all-namespaces", []string{"kubernetes", "--no-default-policies", "--all-namespaces", "-p", x + "/kubernetes/policy", x + "/kubernetes/deployment.yaml"}, ExitFailed,
			[]string{"4 deny, 0 unverifiable, 0 warn", "Containers must not run as root in Deployment hello-kubernetes", "Found deployment hello-kubernetes but deployments are not allowed"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := run(t, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, tc.code, out, errOut)
			}
			for _, s := range tc.contains {
				if !strings.Contains(out, s) {
					t.Errorf("output lacks %q:\n%s", s, out)
				}
			}
		})
	}
}

// TestVerify_badInputIsAUsageError: a policy folder that does not load, or
// none at all, exits 2 with the reason.
func TestVerify_badInputIsAUsageError(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "policy/broken.rego", "package main\n\ndeny contains msg if {\n")
	for name, args := range map[string][]string{
		"syntax error":   {"verify", filepath.Join(dir, "policy")},
		"missing folder": {"verify", filepath.Join(dir, "nope")},
		"no default dir": {"verify", "--policy", filepath.Join(dir, "policy", "nope")},
	} {
		t.Run(name, func(t *testing.T) {
			code, _, errOut := run(t, args...)
			if code != ExitBadUsage || !strings.Contains(errOut, "policy") {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
		})
	}
}

// A policy comes from whoever pushes to the infra repository. conftest's
// file builtins read relative to the policy, so a policy could read a
// credential of the validator's host and put it into a finding that the
// pusher then reads on the pull request. Only files of the policy folders
// are read, also through a symbolic link.
func TestConftestBuiltins_aPolicyReadsNoFileOutsideItsFolders(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "secret.json", `{"token": "s3cr3t-runner-token"}`)
	writeFile(t, dir, "manifest.yaml", "kind: ConfigMap\nmetadata:\n  name: x\n")
	writeFile(t, dir, "policy/own.yaml", "allowed: [a, b]\n")
	if err := os.Symlink(filepath.Join(dir, "secret.json"), filepath.Join(dir, "policy", "link.json")); err != nil {
		t.Fatal(err)
	}
	writeFile(t, dir, "policy/leak.rego", `package main
import rego.v1

deny contains msg if {
	s := parse_config_file("../secret.json")
	msg := sprintf("outside: %v", [s.token])
}

deny contains msg if {
	s := parse_config_file("link.json")
	msg := sprintf("through a link: %v", [s.token])
}

deny contains msg if {
	s := parse_combined_config_files(["own.yaml", "../secret.json"])
	msg := sprintf("combined: %v", [s])
}

warn contains msg if {
	own := parse_config_file("own.yaml")
	msg := sprintf("own file: %v", [own.allowed])
}
`)
	writeFile(t, dir, "policy/leak_test.rego", `package main
import rego.v1

test_reads_outside if {
	parse_config_file("../secret.json").token == "s3cr3t-runner-token"
}

test_reads_own if {
	parse_config_file("own.yaml").allowed == ["a", "b"]
}
`)
	code, out, errOut := run(t, "kubernetes", "--no-default-policies", "-p", filepath.Join(dir, "policy"), filepath.Join(dir, "manifest.yaml"))
	if strings.Contains(out+errOut, "s3cr3t") {
		t.Fatalf("a policy read a file outside its folder (exit %d):\n%s%s", code, out, errOut)
	}
	if code != ExitOK || !strings.Contains(out, "own file: [\"a\", \"b\"]") {
		t.Fatalf("exit %d, want 0 with the policy's own file read:\n%s%s", code, out, errOut)
	}

	code, out, errOut = run(t, "verify", filepath.Join(dir, "policy"))
	if code != ExitFailed || !strings.Contains(out, "data.main.test_reads_outside") || !strings.Contains(out, "2 tests, 1 passed") {
		t.Fatalf("exit %d, want the outside read to fail and the own read to pass:\n%s%s", code, out, errOut)
	}
}
