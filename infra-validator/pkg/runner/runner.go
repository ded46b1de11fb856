// Package runner runs terraform where it can take nothing: every init,
// plan, show and apply of the syncer and the operator goes through a
// Runner, which holds no credential of its caller.
//
// Local starts the run as a child process (a re-exec of the calling binary
// with ChildArg, or `infra-validator runner child`) with an environment
// built from nothing (PATH, its own HOME and TMPDIR, TF_PLUGIN_CACHE_DIR,
// CHECKPOINT_DISABLE), its own working folder, and — where the kernel has
// Landlock — confined to read the system folders, the terraform binary and
// the plugin cache, to write its working folder only, and (Landlock ABI 4
// and later) to open TCP connections only to the ports the run needs. The
// run's own inputs (stack files, variables, the state credential, provider
// settings) travel to it as a Job on its standard input; terraform alone
// sees the credential, in its environment.
//
// Remote sends the same Job to `infra-validator runner serve` (Server), a
// workload of its own that runs each job through Local again.
//
// Both implement terraform.Runner: set it as ExecOptions.Runner and
// terraform.Plan and terraform.Apply hand their run to it.
package runner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
)

// Op is what a Job does.
type Op string

const (
	// OpPlan plans the stack: init, plan, show.
	OpPlan Op = "plan"
	// OpApply applies the approved plan file (or, with LookOnly, only
	// looks whether its configuration is in place).
	OpApply Op = "apply"
)

// MaxJobBytes bounds a Job and a Result on the wire.
const MaxJobBytes = 256 << 20

// Job is one terraform run as it travels to a runner (JSON).
type Job struct {
	Op Op `json:"op"`
	// Files is an uncompressed tar of the stack's root folder (see
	// PlanOptions.Root); Stack is the stack folder inside it.
	Files []byte `json:"files"`
	Stack string `json:"stack"`
	// Vars, VarsFromPlanFile, Workspace and Destroy are as in
	// terraform.PlanOptions.
	Vars             map[string]string `json:"vars,omitempty"`
	VarsFromPlanFile []byte            `json:"varsFromPlanFile,omitempty"`
	Workspace        string            `json:"workspace,omitempty"`
	Destroy          bool              `json:"destroy,omitempty"`
	Backend          terraform.Backend `json:"backend"`
	// Env reaches terraform's environment only: the state credential
	// (TF_HTTP_*) and the provider settings the caller was configured to
	// pass.
	Env map[string]string `json:"env,omitempty"`
	// Secrets are redacted by value from everything the run returns, with
	// the values of Env.
	Secrets []string `json:"secrets,omitempty"`
	// PlanFile and PlanFileSHA256: the approved plan of an apply.
	PlanFile       []byte `json:"planFile,omitempty"`
	PlanFileSHA256 string `json:"planFileSHA256,omitempty"`
	LookOnly       bool   `json:"lookOnly,omitempty"`
	LockTimeout    string `json:"lockTimeout,omitempty"`
	// Timeout bounds the run; zero means terraform.DefaultTimeout.
	Timeout time.Duration `json:"timeout,omitempty"`
	// AllowPorts are TCP ports the run may connect to besides those of
	// the state addresses in Env (provider endpoints).
	AllowPorts []uint16 `json:"allowPorts,omitempty"`
}

// Result is what a run returned.
type Result struct {
	PlanFile []byte `json:"planFile,omitempty"`
	PlanJSON []byte `json:"planJSON,omitempty"`
	InPlace  bool   `json:"inPlace,omitempty"`
	// State and StateError are terraform.ApplyResult's.
	State      *terraform.StateRecord `json:"state,omitempty"`
	StateError string                 `json:"stateError,omitempty"`
	// Error is set when the run failed.
	Error *Error `json:"error,omitempty"`
	// Sandbox says how the run was confined.
	Sandbox Sandbox `json:"sandbox"`
	// Steps are the child's steps and how long each took.
	Steps []terraform.Step `json:"steps,omitempty"`
}

// Error codes of a failed run.
const (
	CodeRun       = "run"       // a terraform step failed: Step, Kind, Diagnostics, Stderr
	CodeStale     = "stale"     // terraform.ErrStalePlan
	CodeMismatch  = "mismatch"  // terraform.ErrPlanFileMismatch
	CodeInvalid   = "invalid"   // the job itself is wrong
	CodeInternal  = "internal"  // the runner failed (a folder, the sandbox)
	CodeForbidden = "forbidden" // the caller is not allowed
)

// Error is a failed run on the wire.
type Error struct {
	Code        string                 `json:"code"`
	Message     string                 `json:"message"`
	Step        string                 `json:"step,omitempty"`
	Kind        terraform.ErrorKind    `json:"kind,omitempty"`
	Diagnostics []terraform.Diagnostic `json:"diagnostics,omitempty"`
	Stderr      string                 `json:"stderr,omitempty"`
}

// Sandbox says how a run was confined.
type Sandbox struct {
	// LandlockABI is the Landlock ABI version enforced; 0 means none (the
	// kernel lacks it): the run could then read and connect to whatever
	// this user can, and only the empty environment protected the caller.
	LandlockABI int `json:"landlockABI"`
	// Network says whether TCP connections were limited to the run's ports
	// (Landlock ABI 4 and later).
	Network bool `json:"network"`
	// UDP says how UDP was confined: to the resolver's port (Landlock ABI
	// 10 and later), closed (a seccomp filter), or not at all.
	UDP UDPConfinement `json:"udp,omitempty"`
	// Processes says how the run's processes were kept together, so that
	// none outlives the run. Set by Local, not by the child.
	Processes Containment `json:"processes,omitempty"`
	// Note explains a missing confinement.
	Note string `json:"note,omitempty"`
}

// UDPConfinement is how a run's UDP is confined.
type UDPConfinement string

const (
	// UDPResolverOnly: Landlock (ABI 10 and later) allows UDP to port 53
	// only, so name resolution works and nothing else leaves over UDP.
	UDPResolverOnly UDPConfinement = "resolver-only"
	// UDPClosed: a seccomp filter refuses every UDP (datagram) socket of
	// the run, DNS over UDP included; the kernel's Landlock cannot allow
	// the resolver alone. Raw, packet and netlink sockets and io_uring are
	// refused as well.
	UDPClosed UDPConfinement = "closed"
	// UDPOpen: neither Landlock nor seccomp could confine UDP.
	UDPOpen UDPConfinement = "open"
)

// landlockUDPABI is the first Landlock ABI that restricts UDP.
const landlockUDPABI = 10

// String is a one-line summary for logs.
func (s Sandbox) String() string {
	var files string
	if s.LandlockABI == 0 {
		files = "no Landlock: " + s.Note
	} else {
		net := "TCP not limited"
		if s.Network {
			net = "TCP limited to the run's ports"
		}
		files = fmt.Sprintf("Landlock ABI %d, files confined, %s", s.LandlockABI, net)
	}
	return fmt.Sprintf("%s, UDP %s, processes contained by %s", files, orUnknown(string(s.UDP)), orUnknown(string(s.Processes)))
}

// Gaps lists, one sentence each, what the kernel or this process's
// privileges leave unconfined; a runner logs them at start.
func (s Sandbox) Gaps() []string {
	var out []string
	if s.LandlockABI == 0 {
		out = append(out, "files and TCP are not confined (no Landlock)")
	} else if !s.Network {
		out = append(out, "TCP connections are not limited to the run's ports (Landlock ABI below 4)")
	}
	if s.UDP == UDPOpen {
		out = append(out, "UDP is not confined (no Landlock UDP rules and no seccomp): a run can send data out over UDP")
	}
	if s.Processes == ContainProcessGroup {
		out = append(out, "no PID namespace: a process of a run that leaves its process group (setsid) can outlive the run")
	}
	return out
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// jobSecrets are the values to redact from a job's results.
func (j *Job) secrets() []string {
	out := slices.Clone(j.Secrets)
	for _, v := range j.Env {
		out = append(out, v)
	}
	return out
}

// statePorts are the TCP ports of the http backend addresses in env (the
// state server).
func statePorts(env map[string]string) []uint16 {
	var out []uint16
	for _, k := range []string{"TF_HTTP_ADDRESS", "TF_HTTP_LOCK_ADDRESS", "TF_HTTP_UNLOCK_ADDRESS"} {
		if p, ok := urlPort(env[k]); ok && !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

func urlPort(raw string) (uint16, bool) {
	if raw == "" {
		return 0, false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return 0, false
	}
	port := u.Port()
	if port == "" {
		switch u.Scheme {
		case "https":
			port = "443"
		case "http":
			port = "80"
		default:
			return 0, false
		}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return 0, false
	}
	return uint16(n), true
}

// ParsePorts reads "443,8443" (as flags give them).
func ParsePorts(s string) ([]uint16, error) {
	var out []uint16
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.ParseUint(f, 10, 16)
		if err != nil || n == 0 {
			return nil, fmt.Errorf("port %q is not a TCP port number", f)
		}
		out = append(out, uint16(n))
	}
	return out, nil
}

// planJob builds the Job of a plan.
func planJob(opts terraform.PlanOptions) (*Job, error) {
	root := opts.Root
	if root == "" {
		root = opts.Dir
	}
	stack, err := relStack(root, opts.Dir)
	if err != nil {
		return nil, err
	}
	files, err := packDir(root)
	if err != nil {
		return nil, fmt.Errorf("terraform runner: pack the stack: %w", err)
	}
	return &Job{
		Op: OpPlan, Files: files, Stack: stack, Vars: opts.Vars, VarsFromPlanFile: opts.VarsFromPlanFile, Workspace: opts.Workspace, Destroy: opts.Destroy,
		Backend: opts.Backend, Env: opts.Env, Secrets: opts.Secrets, Timeout: opts.Timeout,
	}, nil
}

// applyJob builds the Job of an apply.
func applyJob(opts terraform.ApplyOptions) (*Job, error) {
	root := opts.Root
	if root == "" {
		root = opts.Dir
	}
	stack, err := relStack(root, opts.Dir)
	if err != nil {
		return nil, err
	}
	files, err := packDir(root)
	if err != nil {
		return nil, fmt.Errorf("terraform runner: pack the stack: %w", err)
	}
	return &Job{
		Op: OpApply, Files: files, Stack: stack, Workspace: opts.Workspace, Backend: opts.Backend,
		Env: opts.Env, Secrets: opts.Secrets, Timeout: opts.Timeout,
		PlanFile: opts.PlanFile, PlanFileSHA256: opts.PlanFileSHA256, LookOnly: opts.LookOnly, LockTimeout: opts.LockTimeout,
	}, nil
}

func relStack(root, dir string) (string, error) {
	rel, err := filepath.Rel(root, dir)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(rel) {
		return "", errors.New("terraform runner: the stack folder is not inside its root")
	}
	return filepath.ToSlash(rel), nil
}

// asError turns a failed Result back into the error terraform.Plan or
// terraform.Apply would have returned, redacting secrets once more.
func asError(e *Error, secrets []string) error {
	msg := terraform.Redact(e.Message, secrets)
	switch e.Code {
	case CodeRun:
		return terraform.NewRunError(e.Step, e.Kind, e.Diagnostics, e.Stderr, e.Message, secrets)
	case CodeStale:
		return fmt.Errorf("%w (%s)", terraform.ErrStalePlan, strings.TrimPrefix(msg, terraform.ErrStalePlan.Error()+" "))
	case CodeMismatch:
		return fmt.Errorf("%w (%s)", terraform.ErrPlanFileMismatch, msg)
	default:
		return fmt.Errorf("terraform runner: %s", msg)
	}
}

// wireError is the Error of err, as a runner sends it.
func wireError(err error) *Error {
	var runErr *terraform.RunError
	switch {
	case errors.As(err, &runErr):
		msg := ""
		if u := runErr.Unwrap(); u != nil {
			msg = u.Error()
		}
		// The full diagnostics: the receiving side decides again what may
		// be shown (terraform.NewRunError).
		return &Error{Code: CodeRun, Message: msg, Step: runErr.Step, Kind: runErr.Kind, Diagnostics: runErr.Details, Stderr: runErr.Stderr}
	case errors.Is(err, terraform.ErrStalePlan):
		return &Error{Code: CodeStale, Message: err.Error()}
	case errors.Is(err, terraform.ErrPlanFileMismatch):
		return &Error{Code: CodeMismatch, Message: err.Error()}
	default:
		return &Error{Code: CodeInternal, Message: err.Error()}
	}
}

// isDialError reports whether err happened before a connection was made
// (the runner never saw the job).
func isDialError(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// jobRunner runs one Job: Local in a child, Remote in the runner workload.
type jobRunner interface {
	Run(ctx context.Context, job *Job) (*Result, error)
}

// runPlan runs a plan as a Job through r.
func runPlan(ctx context.Context, r jobRunner, opts terraform.PlanOptions) ([]byte, []byte, error) {
	job, err := planJob(opts)
	if err != nil {
		return nil, nil, err
	}
	t0 := time.Now()
	res, err := r.Run(ctx, job)
	recordSteps(opts.Steps, res, t0)
	if err != nil {
		return nil, nil, err
	}
	return res.PlanFile, res.PlanJSON, nil
}

// runApply runs an apply as a Job through r.
func runApply(ctx context.Context, r jobRunner, opts terraform.ApplyOptions) (terraform.ApplyResult, error) {
	job, err := applyJob(opts)
	if err != nil {
		return terraform.ApplyResult{}, err
	}
	t0 := time.Now()
	res, err := r.Run(ctx, job)
	recordSteps(opts.Steps, res, t0)
	if err != nil {
		return terraform.ApplyResult{}, err
	}
	return terraform.ApplyResult{InPlace: res.InPlace, State: res.State, StateError: terraform.Redact(res.StateError, job.secrets())}, nil
}

// recordSteps adds the child's steps of res to s, and as "handoff" the
// rest of the run's time since t0: starting the child (unless a spare
// waited), the job's way in and the result's way out.
func recordSteps(s *terraform.Steps, res *Result, t0 time.Time) {
	if s == nil || res == nil {
		return
	}
	total := time.Since(t0)
	var inChild time.Duration
	for _, st := range res.Steps {
		s.Add(st.Name, st.Took)
		inChild += st.Took
	}
	s.Add("handoff", total-inChild)
}
