package terraform

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"
)

// BackendOverrideFile is the name of the override file Plan writes into a
// stack to choose its backend. The operator writes the same file, with the
// same content, before applying a plan file.
const BackendOverrideFile = "zz_sluice_backend_override.tf"

// DefaultTimeout bounds a whole Plan (init, workspace, plan, show) or a
// ShowPlanFile when ExecOptions.Timeout is zero.
const DefaultTimeout = 10 * time.Minute

// Backend chooses where Plan keeps the state it plans against.
type Backend string

const (
	// BackendOwn uses the backend the stack declares (credentials through
	// ExecOptions.Env).
	BackendOwn Backend = "own"
	// BackendKubernetes writes BackendOverrideFile declaring Terraform's
	// built-in kubernetes backend (DESIGN.md §5). Credentials only through
	// ExecOptions.Env (e.g. KUBE_CONFIG_PATH), never -backend-config,
	// whose values would be saved into the plan file.
	BackendKubernetes Backend = "kubernetes"
	// BackendNone plans statelessly against an empty local state in a
	// temporary folder: every resource is new. For checks only; such a
	// plan is never applied.
	BackendNone Backend = "none"
	// BackendHTTP writes BackendOverrideFile declaring Terraform's http
	// backend with no settings at all: the address and the run credential
	// come only from the environment (TF_HTTP_ADDRESS, TF_HTTP_PASSWORD…,
	// see package tfstate), so a saved plan file records neither, and a
	// plan made against one address applies against another. The http
	// backend has no workspaces: the workspace is part of the address, and
	// terraform.workspace is "default" in the stack.
	BackendHTTP Backend = "http"
)

// ErrRunnerLost is wrapped by the error of a run whose runner went away
// before it answered (killed, restarted, the connection dropped). The run
// may have done anything up to then: an apply may have been applied.
var ErrRunnerLost = errors.New("the terraform runner was lost before it answered")

// Runner runs terraform away from the calling process, in a sandbox that
// holds none of the caller's credentials (package runner). When
// ExecOptions.Runner is set, Plan and Apply check their options here and
// hand the whole run (init, plan, show, apply, the in-place look) to it.
type Runner interface {
	// RunPlan plans opts.Dir (shipping opts.Root) and returns the plan
	// file and its JSON.
	RunPlan(ctx context.Context, opts PlanOptions) (planFile, planJSON []byte, err error)
	// RunApply applies (or, with LookOnly, only looks at) the approved
	// plan file of opts.
	RunApply(ctx context.Context, opts ApplyOptions) (ApplyResult, error)
}

// KubernetesBackend locates the state for BackendKubernetes: Secrets named
// tfstate-<workspace>-<SecretSuffix> in Namespace (the control namespace).
type KubernetesBackend struct {
	Namespace    string
	SecretSuffix string
}

// ExecOptions are common to every terraform run.
type ExecOptions struct {
	// ExecPath is the terraform binary; "" looks up "terraform" in PATH.
	ExecPath string
	// Env is added to the child's environment, e.g. KUBE_CONFIG_PATH or
	// cloud credentials. Nothing else of this process's environment is
	// passed on except PATH and the settings listed in passedEnv; the
	// child never inherits KUBERNETES_SERVICE_* or tokens. TF_VAR_*,
	// TF_CLI_ARGS*, TF_WORKSPACE, TF_LOG* and TF_INPUT are refused: use
	// PlanOptions.Vars and Workspace.
	Env map[string]string
	// DataDir is TF_DATA_DIR for the child. Plan uses a temporary folder
	// when it is empty; ShowPlanFile uses Terraform's default (<dir>/.terraform).
	DataDir string
	// Timeout bounds the whole call; zero means DefaultTimeout.
	Timeout time.Duration
	// Analyze tunes the analysis of the resulting plan.
	Analyze Options
	// Secrets are further values redacted from every error, diagnostic
	// and stderr besides the values of Env (variables read from Secrets,
	// say).
	Secrets []string
	// Runner, when set, runs terraform (see Runner); nil runs it as a
	// child of this process.
	Runner Runner
	// Prepared, when set and the run's folder is the process's current
	// one, is the handle the run uses (its version already asked).
	Prepared *Prepared
	// Steps, when set, records how long each step of the run took (a
	// Runner adds its own: see Step).
	Steps *Steps
}

// PlanOptions describe one plan of a stack.
type PlanOptions struct {
	ExecOptions
	// Root is the folder holding everything the stack may reference (its
	// local modules): a Runner ships Root, and Dir must lie inside it. ""
	// means Dir.
	Root string
	// Dir is the stack's folder. Plan writes BackendOverrideFile into it
	// for BackendKubernetes and BackendNone and removes it afterwards; it
	// refuses to overwrite an existing one. Terraform's working data goes
	// to DataDir, so Dir is otherwise left as it was (Terraform may write
	// .terraform.lock.hcl when the stack uses providers without one).
	Dir string
	// Vars are passed as -var name=value.
	Vars map[string]string
	// VarsFromPlanFile, when set instead of Vars, is a saved plan file of
	// this stack: the plan is made with exactly the variables that plan
	// was made with (its `terraform show -json` "variables"), as the drift
	// plan of an applied change is. The caller checks the file's digest.
	VarsFromPlanFile []byte
	// Workspace is selected, or created when missing; "" means "default".
	// BackendHTTP has no workspaces (the state address names it).
	Workspace string
	// Backend chooses the state; "" means BackendNone.
	Backend Backend
	// Kubernetes is required with BackendKubernetes.
	Kubernetes *KubernetesBackend
	// Destroy makes a destroy plan.
	Destroy bool
}

// PlanResult is what a plan produced: the very plan file that was checked,
// its JSON, the parsed plan and the report.
type PlanResult struct {
	PlanFile []byte
	PlanJSON []byte
	Plan     *tfjson.Plan
	Report   *Report
}

// passedEnv are the variables of this process passed on to terraform when
// set: provider installation and TLS/proxy settings, nothing with access.
var passedEnv = []string{
	"PATH", "TF_CLI_CONFIG_FILE", "TF_PLUGIN_CACHE_DIR", "TF_PLUGIN_CACHE_MAY_BREAK_DEPENDENCY_LOCK_FILE",
	"SSL_CERT_FILE", "SSL_CERT_DIR", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "NO_PROXY", "no_proxy",
	"TMPDIR",
}

var (
	k8sName      = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	secretSuffix = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`)
	wsName       = regexp.MustCompile(`^[A-Za-z0-9_-]{1,90}$`)
	varName      = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
)

// KubernetesBackendOverride returns the content of BackendOverrideFile for
// the kubernetes backend. Only the namespace and secret suffix are written;
// credentials come from the environment.
func KubernetesBackendOverride(namespace, suffix string) ([]byte, error) {
	if len(namespace) > 63 || !k8sName.MatchString(namespace) {
		return nil, fmt.Errorf("kubernetes backend: namespace %q is not a DNS label", namespace)
	}
	// Terraform names the Secret tfstate-<workspace>-<suffix>; keep it a
	// valid name for any workspace of up to 90 characters.
	if len(suffix) > 150 || !secretSuffix.MatchString(suffix) {
		return nil, fmt.Errorf("kubernetes backend: secret suffix %q must be lower-case letters, digits, '-' or '.'", suffix)
	}
	return []byte(fmt.Sprintf(`# Written by Sluice: state in Kubernetes Secrets; credentials come from the environment.
terraform {
  backend "kubernetes" {
    namespace     = %q
    secret_suffix = %q
  }
}
`, namespace, suffix)), nil
}

// HTTPBackendOverride is the content of BackendOverrideFile for
// BackendHTTP: no settings, everything from the environment.
const HTTPBackendOverride = `# Written by Sluice: state through Sluice's state server; address and credentials come from the environment.
terraform {
  backend "http" {}
}
`

func localBackendOverride(stateDir string) []byte {
	return []byte(fmt.Sprintf(`# Written by Sluice: a throw-away local state for a stateless check.
terraform {
  backend "local" {
    path          = %q
    workspace_dir = %q
  }
}
`, filepath.ToSlash(filepath.Join(stateDir, "terraform.tfstate")), filepath.ToSlash(filepath.Join(stateDir, "workspaces"))))
}

// childEnv builds the child's whole environment.
func childEnv(o ExecOptions, home string) (map[string]string, error) {
	env := map[string]string{}
	for _, k := range passedEnv {
		if v, ok := os.LookupEnv(k); ok {
			env[k] = v
		}
	}
	env["HOME"] = home
	env["CHECKPOINT_DISABLE"] = "1"
	if o.DataDir != "" {
		env["TF_DATA_DIR"] = o.DataDir
	}
	keys := make([]string, 0, len(o.Env))
	for k := range o.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, fmt.Errorf("environment variable name %q is invalid", k)
		}
		env[k] = o.Env[k]
	}
	if bad := tfexec.ProhibitedEnv(o.Env); len(bad) > 0 {
		sort.Strings(bad)
		return nil, fmt.Errorf("environment variables %v are managed by the validator: use PlanOptions.Vars and Workspace", bad)
	}
	return env, nil
}

func (o ExecOptions) terraform(ctx context.Context, dir, home string) (*tfexec.Terraform, error) {
	execPath := o.ExecPath
	if execPath == "" {
		p, err := exec.LookPath("terraform")
		if err != nil {
			return nil, fmt.Errorf("terraform binary not found in PATH: %w", err)
		}
		execPath = p
	}
	tf := o.Prepared.take(dir)
	if tf == nil || tf.ExecPath() != execPath {
		var err error
		if tf, err = tfexec.NewTerraform(dir, execPath); err != nil {
			return nil, fmt.Errorf("terraform: %w", err)
		}
	}
	env, err := childEnv(o, home)
	if err != nil {
		return nil, err
	}
	if err := tf.SetEnv(env); err != nil {
		return nil, fmt.Errorf("terraform environment: %w", err)
	}
	tf.SetStdout(io.Discard)
	tf.SetStderr(io.Discard)
	return tf, nil
}

func (o ExecOptions) timeout() time.Duration {
	if o.Timeout > 0 {
		return o.Timeout
	}
	return DefaultTimeout
}

// stderrCapture keeps the first 64 KiB of one step's error output.
type stderrCapture struct{ buf bytes.Buffer }

func (c *stderrCapture) Write(p []byte) (int, error) {
	if room := 64<<10 - c.buf.Len(); room > 0 {
		c.buf.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// run runs one terraform step with its error output captured; a failure
// is a *RunError with terraform's diagnostics, redacted.
func (o ExecOptions) run(ctx context.Context, tf *tfexec.Terraform, step string, f func() error) error {
	var stderr stderrCapture
	tf.SetStderr(&stderr)
	defer tf.SetStderr(io.Discard)
	defer o.Steps.Since(step, time.Now())
	if err := f(); err != nil {
		return stepError(ctx, step, o.timeout(), contextOnly(ctx, err), stderr.buf.String(), o.secrets())
	}
	return nil
}

// contextOnly replaces the error terraform-exec returns when its context
// ended while the command itself did not fail: a value whose Error method
// dereferences the command's nil error and panics (it unwraps to nil and
// matches context.Canceled and DeadlineExceeded). A plan stopped because a
// chart problem already decided the release ends that way when the stop
// comes as terraform exits. It becomes the context's own error; any other
// error is returned as it is.
func contextOnly(ctx context.Context, err error) error {
	if errors.Unwrap(err) != nil || !(errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)) {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return context.Canceled
}

// ShowPlanFile runs `terraform show -json` on a binary plan file in an
// initialised stack folder dir (through terraform-exec), then reads and
// analyses the JSON. The result carries the plan file's bytes and its
// PlanFileSHA256.
func ShowPlanFile(ctx context.Context, opts ExecOptions, dir, planFile string) (*PlanResult, error) {
	ctx, cancel := context.WithTimeout(ctx, opts.timeout())
	defer cancel()
	home, err := os.MkdirTemp("", "sluice-tf-home-")
	if err != nil {
		return nil, fmt.Errorf("terraform: temporary folder: %w", err)
	}
	defer os.RemoveAll(home)
	tf, err := opts.terraform(ctx, dir, home)
	if err != nil {
		return nil, err
	}
	return show(ctx, tf, opts, planFile)
}

func show(ctx context.Context, tf *tfexec.Terraform, opts ExecOptions, planFile string) (*PlanResult, error) {
	planBytes, planJSON, err := showRaw(ctx, tf, opts, planFile)
	if err != nil {
		return nil, err
	}
	return NewPlanResult(planBytes, planJSON, opts.Analyze)
}

// showRaw reads the plan file and its JSON (terraform show -json).
func showRaw(ctx context.Context, tf *tfexec.Terraform, opts ExecOptions, planFile string) (planBytes, planJSON []byte, err error) {
	planBytes, err = os.ReadFile(planFile)
	if err != nil {
		return nil, nil, fmt.Errorf("plan file: %w", err)
	}
	// Cache the version first: terraform-exec would otherwise write the
	// output of `terraform version` to the capture below.
	if err := opts.run(ctx, tf, "version", func() error { _, _, err := tf.Version(ctx, false); return err }); err != nil {
		return nil, nil, err
	}
	var out bytes.Buffer
	tf.SetStdout(&out)
	err = opts.run(ctx, tf, "show", func() error { _, err := tf.ShowPlanFile(ctx, planFile); return err })
	tf.SetStdout(io.Discard)
	if err != nil {
		return nil, nil, err
	}
	return planBytes, bytes.TrimSpace(out.Bytes()), nil
}

// NewPlanResult reads and analyses a plan's JSON and records the plan
// file's sha256: what Plan returns, from the output of a Runner.
func NewPlanResult(planFile, planJSON []byte, analyze Options) (*PlanResult, error) {
	plan, err := ReadPlan(planJSON)
	if err != nil {
		return nil, err
	}
	rep, err := Analyze(planJSON, analyze)
	if err != nil {
		return nil, err
	}
	rep.PlanFileSHA256 = PlanFileSHA256(planFile)
	return &PlanResult{PlanFile: planFile, PlanJSON: planJSON, Plan: plan, Report: rep}, nil
}

// Plan plans a stack folder through terraform-exec: init with the chosen
// backend, select or create the workspace, plan into a file, and show it as
// JSON. It returns the plan file (for the syncer to store and the operator
// to apply), its JSON, the parsed plan and the report. A failing terraform
// step returns a *RunError carrying terraform's diagnostics, whose Kind
// says whether the stack is wrong (ErrorConfiguration: syntax errors,
// undeclared variables…) or the state backend or network failed
// (ErrorBackend, worth retrying). Terraform runs as a
// child process with the environment described on ExecOptions.Env, HOME in
// a temporary folder, and the whole call is bounded by Timeout.
func Plan(ctx context.Context, opts PlanOptions) (*PlanResult, error) {
	if err := opts.check(); err != nil {
		return nil, err
	}
	if opts.Runner != nil {
		planFile, planJSON, err := opts.Runner.RunPlan(ctx, opts)
		if err != nil {
			return nil, err
		}
		return NewPlanResult(planFile, planJSON, opts.Analyze)
	}
	planFile, planJSON, err := PlanFiles(ctx, opts)
	if err != nil {
		return nil, err
	}
	return NewPlanResult(planFile, planJSON, opts.Analyze)
}

// check refuses options no run could use.
func (opts PlanOptions) check() error {
	if opts.Dir == "" {
		return errors.New("terraform plan: no stack folder given")
	}
	if fi, err := os.Stat(opts.Dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("terraform plan: stack folder %s does not exist", filepath.Base(opts.Dir))
	}
	if opts.Root != "" {
		if rel, err := filepath.Rel(opts.Root, opts.Dir); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return fmt.Errorf("terraform plan: stack folder %s is not inside its root", filepath.Base(opts.Dir))
		}
	}
	if opts.Workspace != "" && !wsName.MatchString(opts.Workspace) {
		return fmt.Errorf("terraform plan: workspace %q must match ^[A-Za-z0-9_-]+$", opts.Workspace)
	}
	for k := range opts.Vars {
		if !varName.MatchString(k) {
			return fmt.Errorf("terraform plan: variable name %q is invalid", k)
		}
	}
	if len(opts.Vars) > 0 && opts.VarsFromPlanFile != nil {
		return errors.New("terraform plan: variables come either from Vars or from VarsFromPlanFile, not both")
	}
	return nil
}

// PlanFiles is Plan run here (never through opts.Runner), without the
// analysis: the plan file and its JSON. Runners call it in their sandbox.
func PlanFiles(ctx context.Context, opts PlanOptions) (planFile, planJSON []byte, err error) {
	if err := opts.check(); err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout())
	defer cancel()
	st, err := openStack(ctx, "terraform plan", opts.ExecOptions, opts.Dir, opts.Backend, opts.Kubernetes, opts.Workspace)
	if err != nil {
		return nil, nil, err
	}
	defer st.close()
	tf, tmp := st.tf, st.tmp

	file := filepath.Join(tmp, "plan.tfplan")
	planOpts := []tfexec.PlanOption{tfexec.Out(file), tfexec.Destroy(opts.Destroy)}
	names := make([]string, 0, len(opts.Vars))
	for k := range opts.Vars {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		planOpts = append(planOpts, tfexec.Var(k+"="+opts.Vars[k]))
	}
	if opts.VarsFromPlanFile != nil {
		vars, err := varsOfPlanFile(ctx, tf, opts.ExecOptions, filepath.Join(tmp, "vars.tfplan"), opts.VarsFromPlanFile)
		if err != nil {
			return nil, nil, err
		}
		for _, v := range vars {
			planOpts = append(planOpts, v)
		}
	}
	if err := opts.run(ctx, tf, "plan", func() error { _, err := tf.Plan(ctx, planOpts...); return err }); err != nil {
		return nil, nil, err
	}
	return showRaw(ctx, tf, opts.ExecOptions, file)
}

// varsOfPlanFile writes planFile to path and returns the -var options of
// the variables it was made with.
func varsOfPlanFile(ctx context.Context, tf *tfexec.Terraform, opts ExecOptions, path string, planFile []byte) ([]*tfexec.VarOption, error) {
	if err := os.WriteFile(path, planFile, 0o600); err != nil {
		return nil, fmt.Errorf("terraform plan: %w", err)
	}
	var plan *tfjson.Plan
	err := opts.run(ctx, tf, "show", func() error {
		var err error
		plan, err = tf.ShowPlanFile(ctx, path)
		return err
	})
	if err != nil {
		return nil, err
	}
	vars, err := planVars(plan)
	if err != nil {
		return nil, fmt.Errorf("terraform plan: the variables of the saved plan: %w", err)
	}
	return vars, nil
}

// stack is a stack folder initialised for one terraform call: the backend
// override written (and removed by close), init run, the workspace chosen.
type stack struct {
	tf     *tfexec.Terraform
	tmp    string // private temporary folder: HOME, data dir, local state
	remove []string
}

func (s *stack) close() {
	for _, p := range s.remove {
		_ = os.Remove(p)
	}
	_ = os.RemoveAll(s.tmp)
}

// openStack prepares dir for op ("terraform plan", "terraform apply"):
// a private HOME and data folder, the backend override for backend, init,
// and the workspace ("" and "default" keep the default one).
func openStack(ctx context.Context, op string, opts ExecOptions, dir string, backend Backend, k *KubernetesBackend, workspace string) (_ *stack, err error) {
	tmp, err := os.MkdirTemp("", "sluice-tf-")
	if err != nil {
		return nil, fmt.Errorf("%s: temporary folder: %w", op, err)
	}
	st := &stack{tmp: tmp}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	home := filepath.Join(tmp, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	if opts.DataDir == "" {
		opts.DataDir = filepath.Join(tmp, "data")
	}

	var override []byte
	switch backend {
	case BackendOwn:
	case BackendKubernetes:
		if k == nil {
			return nil, fmt.Errorf("%s: the kubernetes backend needs a namespace and secret suffix", op)
		}
		override, err = KubernetesBackendOverride(k.Namespace, k.SecretSuffix)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	case BackendHTTP:
		override = []byte(HTTPBackendOverride)
		workspace = "" // part of the state address
	case "", BackendNone:
		override = localBackendOverride(filepath.Join(tmp, "state"))
	default:
		return nil, fmt.Errorf("%s: unknown backend %q (own, kubernetes, http or none)", op, backend)
	}
	if override != nil {
		path := filepath.Join(dir, BackendOverrideFile)
		// O_EXCL: never replace a file the repository ships under this name.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err != nil {
			return nil, fmt.Errorf("%s: writing %s: %w", op, BackendOverrideFile, errors.Unwrap(err))
		}
		st.remove = append(st.remove, path)
		_, werr := f.Write(override)
		if cerr := f.Close(); werr == nil {
			werr = cerr
		}
		if werr != nil {
			return nil, fmt.Errorf("%s: writing %s: %w", op, BackendOverrideFile, werr)
		}
	}

	tf, err := opts.terraform(ctx, dir, home)
	if err != nil {
		return nil, err
	}
	if err := opts.run(ctx, tf, "init", func() error { return tf.Init(ctx, tfexec.Backend(true), tfexec.Reconfigure(true)) }); err != nil {
		return nil, err
	}
	if workspace != "" && workspace != "default" {
		if err := opts.run(ctx, tf, "workspace", func() error { return selectWorkspace(ctx, tf, workspace) }); err != nil {
			return nil, err
		}
	}
	st.tf = tf
	return st, nil
}

func selectWorkspace(ctx context.Context, tf *tfexec.Terraform, ws string) error {
	list, _, err := tf.WorkspaceList(ctx)
	if err != nil {
		return err
	}
	for _, w := range list {
		if w == ws {
			return tf.WorkspaceSelect(ctx, ws)
		}
	}
	return tf.WorkspaceNew(ctx, ws)
}
