package terraform

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A real init of a stack with a syntax error (terraform 1.11, -no-color).
const initSyntaxError = `There are some problems with the CLI configuration:
╷
│ Warning: Unable to open CLI configuration file
│
│ The CLI configuration file at "/home/x/.terraformrc" does not exist.
╵

Initializing the backend...

Error: Terraform encountered problems during initialisation, including problems
with the configuration, described below.

The Terraform configuration must be valid before initialization so that
Terraform can determine which modules and providers need to be installed.


Error: Unclosed configuration block

  on main.tf line 1, in resource "terraform_data" "a":
   1: resource "terraform_data" "a" {

There is no closing brace for this block before the end of the file. This may
be caused by incorrect brace nesting elsewhere in this file.
`

// A real plan given a variable the stack does not declare.
const planUndeclared = `
Error: Value for undeclared variable

A variable named "region" was assigned on the command line, but the root
module does not declare a variable of that name. To use this value, add a
"variable" block to the configuration.
`

// A real init against an unreachable kubernetes backend.
const initUnreachable = `
Initializing the backend...

Error: Failed to get existing workspaces: Get "https://127.0.0.1:1/api/v1/namespaces/ns1/secrets?labelSelector=tfstate%3Dtrue": dial tcp 127.0.0.1:1: connect: connection refused
`

// The same errors with terraform's box-drawing margin.
const boxed = `╷
│ Error: Unsupported argument
│
│   on main.tf line 3, in resource "terraform_data" "a":
│    3:   bogus = 1
│
│ An argument named "bogus" is not expected here.
╵
`

func TestParseDiagnostics_readsTerraformsErrors(t *testing.T) {
	tests := []struct {
		name   string
		stderr string
		want   []Diagnostic
		kind   ErrorKind
	}{
		{"a syntax error found by init points at its file and line", initSyntaxError, []Diagnostic{{
			Summary: "Unclosed configuration block", File: "main.tf", Line: 1,
			Detail: "There is no closing brace for this block before the end of the file. This may be caused by incorrect brace nesting elsewhere in this file.",
		}}, ErrorConfiguration},
		{"an undeclared variable is a configuration error without a location", planUndeclared, []Diagnostic{{
			Summary: "Value for undeclared variable",
			Detail:  `A variable named "region" was assigned on the command line, but the root module does not declare a variable of that name. To use this value, add a "variable" block to the configuration.`,
		}}, ErrorConfiguration},
		{"an unreachable backend is a back-end error", initUnreachable, []Diagnostic{{
			Summary: `Failed to get existing workspaces: Get "https://127.0.0.1:1/api/v1/namespaces/ns1/secrets?labelSelector=tfstate%3Dtrue": dial tcp 127.0.0.1:1: connect: connection refused`,
		}}, ErrorBackend},
		{"the box-drawing margin is read too", boxed, []Diagnostic{{
			Summary: "Unsupported argument", File: "main.tf", Line: 3, Detail: `An argument named "bogus" is not expected here.`,
		}}, ErrorConfiguration},
		{"output without errors gives nothing and is retried", "Initializing the backend...\nsegmentation fault\n", nil, ErrorBackend},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ParseDiagnostics(tt.stderr)
			if fmt.Sprintf("%#v", got) != fmt.Sprintf("%#v", tt.want) {
				t.Errorf("ParseDiagnostics:\n got  %#v\n want %#v", got, tt.want)
			}
			if k := classifyFailure(got); k != tt.kind {
				t.Errorf("kind %s, want %s", k, tt.kind)
			}
		})
	}
}

func TestRedact_removesCredentials(t *testing.T) {
	in := strings.Join([]string{
		`Get "https://bob:hunter2pass@git.example.com/x": refused`,
		`Authorization: Bearer abcdefghijklmnop.qrstuv`,
		`password = "s3cr3t-value"`,
		`token=tok_1234567890`,
		`key AKIAABCDEFGHIJKLMNOP in use`,
		`-----BEGIN RSA PRIVATE KEY-----` + "\nMIIEow\n" + `-----END RSA PRIVATE KEY-----`,
		`env value from-the-environment-42 leaked`,
	}, "\n")
	out := redact(in, []string{"from-the-environment-42", "short"})
	for _, secret := range []string{"hunter2pass", "abcdefghijklmnop", "s3cr3t-value", "tok_1234567890", "AKIAABCDEFGHIJKLMNOP", "MIIEow", "from-the-environment-42"} {
		if strings.Contains(out, secret) {
			t.Errorf("%q survived redaction:\n%s", secret, out)
		}
	}
	if !strings.Contains(out, "git.example.com") || !strings.Contains(out, "leaked") {
		t.Errorf("redaction removed more than the credentials:\n%s", out)
	}
}

// brokenStack writes a one-file stack into a new folder.
func brokenStack(t *testing.T, main string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runError(t *testing.T, err error) *RunError {
	t.Helper()
	var re *RunError
	if !errors.As(err, &re) {
		t.Fatalf("err = %v (%T), want a *RunError", err, err)
	}
	return re
}

func TestPlan_aSyntaxErrorIsAConfigurationErrorWithItsLocation(t *testing.T) {
	dir := brokenStack(t, "resource \"terraform_data\" \"a\" {\n  input = \"x\"\n  bogus {\n}\n")
	_, err := Plan(context.Background(), PlanOptions{ExecOptions: ExecOptions{ExecPath: terraformPath(t)}, Dir: dir})
	re := runError(t, err)
	if re.Kind != ErrorConfiguration || !errors.Is(err, ErrConfiguration) || !IsConfigurationError(fmt.Errorf("wrapped: %w", err)) {
		t.Fatalf("kind %s, want configuration: %v", re.Kind, err)
	}
	if re.Step != "init" || len(re.Diagnostics) == 0 || re.Diagnostics[0].File != "main.tf" || re.Diagnostics[0].Line < 1 {
		t.Fatalf("want a diagnostic at main.tf:<line> from init, got step %s %+v", re.Step, re.Diagnostics)
	}
	if !strings.Contains(err.Error(), "main.tf:") {
		t.Errorf("the message names no location: %v", err)
	}
}

func TestPlan_anUndeclaredVariableIsAConfigurationError(t *testing.T) {
	stacks := copyStacks(t)
	_, err := Plan(context.Background(), PlanOptions{ExecOptions: ExecOptions{ExecPath: terraformPath(t)},
		Dir: filepath.Join(stacks, "ordered"), Vars: map[string]string{"region": "eu-west-1"}})
	re := runError(t, err)
	if re.Kind != ErrorConfiguration || re.Step != "plan" {
		t.Fatalf("step %s kind %s, want plan/configuration: %v", re.Step, re.Kind, err)
	}
	if !strings.Contains(err.Error(), "Value for undeclared variable") || !strings.Contains(err.Error(), `"region"`) {
		t.Errorf("unreadable message: %v", err)
	}
}

// TestPlan_anUnreachableKubernetesBackendIsABackendError: the state
// backend's API server does not answer; the error is worth retrying and
// carries no credential of the environment.
func TestPlan_anUnreachableKubernetesBackendIsABackendError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there any more
	const token = "kube-token-0123456789abcdef"
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: %q}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, addr, token)
	if err := os.WriteFile(kubeconfig, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	stacks := copyStacks(t)
	_, err = Plan(context.Background(), PlanOptions{
		ExecOptions: ExecOptions{ExecPath: terraformPath(t), Env: map[string]string{"KUBE_CONFIG_PATH": kubeconfig, "KUBE_TOKEN": token}},
		Dir:         filepath.Join(stacks, "ordered"),
		Backend:     BackendKubernetes,
		Kubernetes:  &KubernetesBackend{Namespace: "ns1", SecretSuffix: "rel"},
	})
	re := runError(t, err)
	if re.Kind != ErrorBackend || errors.Is(err, ErrConfiguration) {
		t.Fatalf("kind %s, want backend: %v", re.Kind, err)
	}
	if !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("the message does not say why: %v", err)
	}
	if strings.Contains(err.Error()+re.Stderr+fmt.Sprint(re.Diagnostics), token) {
		t.Error("the error carries the token")
	}
}

func FuzzParseDiagnostics(f *testing.F) {
	for _, s := range []string{initSyntaxError, planUndeclared, initUnreachable, boxed, "", "Error: \n  on  line 99999999999999999999:\n", "Error: x\n  on a.tf line -1, in y:\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, stderr string) {
		diags := ParseDiagnostics(stderr)
		if len(diags) > maxDiagnostics {
			t.Fatalf("%d diagnostics", len(diags))
		}
		for _, d := range diags {
			if d.Line < 0 {
				t.Fatalf("negative line %d", d.Line)
			}
		}
		_ = classifyFailure(diags)
		_ = redact(stderr, []string{"secret-value"})
	})
}

func TestRunError_messageListsTheDiagnosticsWithinAboutOneKiB(t *testing.T) {
	e := &RunError{Step: "plan", Kind: ErrorConfiguration}
	for i := range 40 {
		e.Diagnostics = append(e.Diagnostics, Diagnostic{Summary: "Invalid reference", Detail: strings.Repeat("x", 60), File: "main.tf", Line: i + 1})
	}
	msg := e.Error()
	if len(msg) > 1100 || !strings.HasPrefix(msg, "terraform plan: configuration error: main.tf:1: Invalid reference") || !strings.Contains(msg, "more)") {
		t.Errorf("%d bytes: %s", len(msg), msg)
	}
	two := (&RunError{Step: "init", Kind: ErrorBackend, Diagnostics: e.Diagnostics[:2]}).Error()
	if !strings.Contains(two, "main.tf:1:") || !strings.Contains(two, "; main.tf:2:") {
		t.Errorf("not every diagnostic is named: %s", two)
	}
}

// TestParseDiagnostics_dropsTheValuesTerraformRead: the attack of a
// stack that turns a file it read into a number error: neither the
// snippet's "x is …" lines nor the quoted value in the detail survive.
func TestParseDiagnostics_dropsTheValuesTerraformRead(t *testing.T) {
	const value = "eyJhbGciOiJSUzI1NiJ9-eyJzdWIiOiJzeXN0ZW0ifQ-c2lnbmF0dXJl"
	stderr := `
Error: Invalid function argument

  on main.tf line 1, in locals:
   1: locals { t = tonumber(replace(file("/run/token"), ".", "-")) }
    ├────────────────
    │ local.raw is "` + value + `"
    │ while calling tonumber(v)

Invalid value for "v" parameter: cannot convert
"` + value + `" to number; given
string must be a decimal representation of a number.
`
	diags := ParseDiagnostics(stderr)
	if len(diags) != 1 || strings.Contains(diags[0].Detail, value) || !strings.Contains(diags[0].Detail, `"(value hidden)"`) {
		t.Fatalf("the value survived: %+v", diags)
	}
	if got := scrubSnippets(stderr); strings.Contains(got, "local.raw is") || !strings.Contains(got, "on main.tf line 1") {
		t.Fatalf("the snippet survived:\n%s", got)
	}
	e := NewRunError("plan", ErrorConfiguration, []Diagnostic{{Summary: "x", Detail: `cannot convert "` + value + `"`}}, stderr, "exit status 1", nil)
	if strings.Contains(e.Error(), value) || strings.Contains(e.Stderr, "local.raw is") || strings.Contains(e.Stderr, value) {
		t.Fatalf("a rebuilt error kept the value: %v / %s", e, e.Stderr)
	}
}

// stateWithSecret applies, with its own local state, a stack holding a
// sensitive value, then adds attack to the stack: what a later push
// plans against that state.
func stateWithSecret(t *testing.T, secret, attack string) string {
	t.Helper()
	dir := t.TempDir()
	base := `terraform {
  backend "local" {
    path = "state/terraform.tfstate"
  }
}
resource "terraform_data" "db" {
  input = sensitive("` + secret + `")
}
`
	if err := os.WriteFile(filepath.Join(dir, "main.tf"), []byte(base), 0o644); err != nil {
		t.Fatal(err)
	}
	res := plan(t, PlanOptions{Dir: dir, Backend: BackendOwn})
	if _, err := Apply(context.Background(), applyOpts(t, dir, res)); err != nil {
		t.Fatalf("apply the state: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "attack.tf"), []byte(attack), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPlan_aPlanErrorShowsNoPieceOfTheStateOrOfAFile: the attacks of a
// pusher reading a release's state and the runner's files through plan
// errors: a piece of a sensitive state value made a number error,
// /etc/hosts made a number error, a validation message quoting the value
// and an object key named after it. No piece of any of it is in what
// may be shown (Diagnostics, Error()); the full text is in Details.
func TestPlan_aPlanErrorShowsNoPieceOfTheStateOrOfAFile(t *testing.T) {
	const secret = "Zq7-sEcReT-vAlUe-9xKw"
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	attacks := map[string]string{
		"a piece of a sensitive value as a number": `locals { x = tonumber(substr(nonsensitive(terraform_data.db.output), 0, 12)) }
output "x" { value = local.x }`,
		"a readable file as a number": `locals { h = tonumber(file("/etc/hosts")) }
output "h" { value = local.h }`,
		"the value in a validation message": `variable "v" {
  default = "a"
  validation {
    condition     = var.v == "b"
    error_message = "no ${nonsensitive(terraform_data.db.output)}"
  }
}`,
		"the value as an object key": `locals { o = { (substr(nonsensitive(terraform_data.db.output), 4, 6)) = 1 }.sEcReZ }
output "o" { value = local.o }`,
	}
	for name, attack := range attacks {
		t.Run(name, func(t *testing.T) {
			dir := stateWithSecret(t, secret, attack)
			_, err := Plan(context.Background(), PlanOptions{ExecOptions: ExecOptions{ExecPath: terraformPath(t)}, Dir: dir, Backend: BackendOwn})
			re := runError(t, err)
			shown := err.Error() + fmt.Sprint(re.Diagnostics)
			for _, piece := range pieces(secret, 4) {
				if strings.Contains(shown, piece) {
					t.Errorf("%q of the state value is shown: %s", piece, shown)
				}
			}
			for _, line := range strings.Split(string(hosts), "\n") {
				for _, f := range strings.Fields(line) {
					if len(f) >= 4 && strings.Contains(shown, f) {
						t.Errorf("%q of /etc/hosts is shown: %s", f, shown)
					}
				}
			}
			if !re.HasWithheld() || len(re.Details) != len(re.Diagnostics) {
				t.Fatalf("want the diagnostic withheld and its details kept: %+v / %+v", re.Diagnostics, re.Details)
			}
			if d := re.Diagnostics[0]; d.File != "attack.tf" || d.Line < 1 {
				t.Errorf("the withheld diagnostic does not say where: %+v", d)
			}
			if fmt.Sprint(re.Details) == fmt.Sprint(re.Diagnostics) {
				t.Errorf("the details for approvers are gone: %+v", re.Details)
			}
			// What a runner sends back is judged again.
			back := NewRunError(re.Step, re.Kind, re.Details, re.Stderr, "exit status 1", nil)
			if fmt.Sprint(back.Diagnostics) != fmt.Sprint(re.Diagnostics) {
				t.Errorf("rebuilt from the runner: %+v, want %+v", back.Diagnostics, re.Diagnostics)
			}
		})
	}
}

// pieces are the substrings of s of n bytes.
func pieces(s string, n int) []string {
	var out []string
	for i := 0; i+n <= len(s); i++ {
		out = append(out, s[i:i+n])
	}
	return out
}

func TestShown_keepsStaticAndBackEndErrorsAndWithholdsTheRest(t *testing.T) {
	tests := []struct {
		name string
		d    Diagnostic
		keep bool
	}{
		{"an unsupported argument", Diagnostic{Summary: "Unsupported argument", Detail: `An argument named "bogus" is not expected here.`, File: "main.tf", Line: 3}, true},
		{"an undeclared variable", Diagnostic{Summary: "Value for undeclared variable", Detail: `A variable named "region" was assigned on the command line.`}, true},
		{"a duplicate resource", Diagnostic{Summary: `Duplicate resource "terraform_data" configuration`, Detail: `A terraform_data resource named "a" was already declared at main.tf:1,1-30.`, File: "main.tf", Line: 2}, true},
		{"an unreachable back end", Diagnostic{Summary: `Failed to get existing workspaces: Get "https://127.0.0.1:1/x": dial tcp 127.0.0.1:1: connect: connection refused`}, true},
		{"a function argument", Diagnostic{Summary: "Invalid function argument", Detail: `Invalid value for "v" parameter: cannot convert "Zq7-sEcReT-V" to number`, File: "main.tf", Line: 1}, false},
		{"a validation message", Diagnostic{Summary: "Invalid value for variable", Detail: "no Zq7-sEcReT-vAlUe-9xKw", File: "main.tf", Line: 1}, false},
		{"a static summary quoting a value", Diagnostic{Summary: "Unsupported argument", Detail: `An argument named "Zq7 sEcReT" is not expected here.`}, false},
		{"a remote state data source named like a back end", Diagnostic{Summary: "Error loading state", Detail: "127.0.0.1 localhost", File: "main.tf", Line: 4}, false},
		{"an unsupported attribute, which suggests object keys", Diagnostic{Summary: "Unsupported attribute", Detail: `Did you mean "sEcR"?`, File: "main.tf", Line: 1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := shown([]Diagnostic{tt.d})[0]
			if kept := got.Summary != Withheld; kept != tt.keep {
				t.Fatalf("shown %+v, keep=%v", got, tt.keep)
			}
			if !tt.keep && (got.Detail != "" || got.File != tt.d.File || got.Line != tt.d.Line) {
				t.Errorf("withheld as %+v", got)
			}
		})
	}
}
