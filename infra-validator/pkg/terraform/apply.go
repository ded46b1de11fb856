package terraform

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/terraform-exec/tfexec"
	tfjson "github.com/hashicorp/terraform-json"
)

// DefaultLockTimeout is how long an apply waits for the state lock (a plan
// of the same stack may hold it for a moment).
const DefaultLockTimeout = "2m"

var (
	// ErrStalePlan: the state changed after the plan was made, so
	// terraform refused to apply it and applied nothing. Only a new plan
	// (and a new approval) can go on.
	ErrStalePlan = errors.New("the plan is stale: the state changed after it was made")
	// ErrPlanFileMismatch: the plan file's sha256 is not the approved one.
	ErrPlanFileMismatch = errors.New("the plan file does not match the approved planFileSHA256")
)

// ApplyOptions say which approved plan file to apply to which stack.
type ApplyOptions struct {
	ExecOptions
	// Root is the folder holding everything the stack may reference (the
	// extracted artifact); a Runner ships it. "" means Dir.
	Root string
	// Dir is the stack's folder, as it was planned (the approved artifact).
	// Like Plan, Apply writes BackendOverrideFile into it and removes it
	// afterwards.
	Dir string
	// PlanFile is the binary plan file and PlanFileSHA256 its approved
	// digest ("sha256:<hex>"); nothing runs unless they match.
	PlanFile       []byte
	PlanFileSHA256 string
	// Workspace is the one the plan was made in; "" means "default".
	Workspace string
	// Backend must be the one the plan was made with: BackendKubernetes
	// (with Kubernetes) or BackendOwn. A BackendNone plan was made against
	// an empty throw-away state and is never applied.
	Backend    Backend
	Kubernetes *KubernetesBackend
	// LockTimeout is passed as -lock-timeout; "" means DefaultLockTimeout.
	LockTimeout string
	// LookOnly applies nothing: it only looks whether the approved
	// configuration is already in place (the look Apply takes after a
	// stale plan, without taking the state lock). For a retry after a
	// runner was lost mid-apply, when the plan may have been applied.
	// InPlace, or ErrStalePlan.
	LookOnly bool
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	// InPlace is set when terraform found the plan stale but the
	// infrastructure already matches the configuration the plan was made
	// from (the plan was applied before, say by an operator that then
	// restarted before recording it): nothing was applied.
	InPlace bool
	// State is the state the apply left (or found in place), read with
	// `terraform state pull` right after terraform finished; nil when it
	// could not be read, and StateError says why. The apply itself
	// succeeded either way.
	State      *StateRecord `json:"state,omitempty"`
	StateError string       `json:"stateError,omitempty"`
}

// Apply applies an approved plan file through terraform-exec: it checks the
// file against PlanFileSHA256, initialises the stack with the plan's
// backend, selects the workspace and runs `terraform apply PLANFILE`.
//
// It never applies a plan of its own. When terraform refuses the plan as
// stale, Apply plans the approved configuration once more with the plan's
// own variables, only to look: no changes means the approved configuration
// is what is deployed (ApplyResult.InPlace); changes, or any failure to
// tell, return ErrStalePlan (terraform applied nothing). Any other
// terraform failure is a *RunError with terraform's diagnostics. Terraform
// runs as a child process with the environment described on
// ExecOptions.Env.
func Apply(ctx context.Context, opts ApplyOptions) (ApplyResult, error) {
	if opts.Dir == "" {
		return ApplyResult{}, errors.New("terraform apply: no stack folder given")
	}
	if fi, err := os.Stat(opts.Dir); err != nil || !fi.IsDir() {
		return ApplyResult{}, fmt.Errorf("terraform apply: stack folder %s does not exist", filepath.Base(opts.Dir))
	}
	if opts.Workspace != "" && !wsName.MatchString(opts.Workspace) {
		return ApplyResult{}, fmt.Errorf("terraform apply: workspace %q must match ^[A-Za-z0-9_-]+$", opts.Workspace)
	}
	switch opts.Backend {
	case BackendKubernetes, BackendOwn, BackendHTTP:
	case "", BackendNone:
		return ApplyResult{}, errors.New("terraform apply: a plan made without a backend (none) was made against an empty state and is never applied")
	default:
		return ApplyResult{}, fmt.Errorf("terraform apply: unknown backend %q (own, kubernetes or http)", opts.Backend)
	}
	if got := PlanFileSHA256(opts.PlanFile); len(opts.PlanFile) == 0 || got != opts.PlanFileSHA256 {
		return ApplyResult{}, fmt.Errorf("%w: it hashes to %s, %q was approved", ErrPlanFileMismatch, got, opts.PlanFileSHA256)
	}
	if opts.Runner != nil {
		return opts.Runner.RunApply(ctx, opts)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout())
	defer cancel()
	st, err := openStack(ctx, "terraform apply", opts.ExecOptions, opts.Dir, opts.Backend, opts.Kubernetes, opts.Workspace)
	if err != nil {
		return ApplyResult{}, err
	}
	defer st.close()
	planFile := filepath.Join(st.tmp, "approved.tfplan")
	if err := os.WriteFile(planFile, opts.PlanFile, 0o600); err != nil {
		return ApplyResult{}, fmt.Errorf("terraform apply: %w", err)
	}
	lock := opts.LockTimeout
	if lock == "" {
		lock = DefaultLockTimeout
	}
	if opts.LookOnly {
		if inPlace(ctx, st, opts, planFile, "") {
			return withState(ctx, st, opts, ApplyResult{InPlace: true}), nil
		}
		return ApplyResult{}, fmt.Errorf("%w (a look after an interrupted apply found changes, or could not tell)", ErrStalePlan)
	}
	err = opts.run(ctx, st.tf, "apply", func() error {
		return st.tf.Apply(ctx, tfexec.DirOrPlan(planFile), tfexec.LockTimeout(lock))
	})
	var runErr *RunError
	if errors.As(err, &runErr) && isStale(runErr) {
		if inPlace(ctx, st, opts, planFile, lock) {
			return withState(ctx, st, opts, ApplyResult{InPlace: true}), nil
		}
		return ApplyResult{}, fmt.Errorf("%w (%s)", ErrStalePlan, runErr.Error())
	}
	if err != nil {
		return ApplyResult{}, err
	}
	return withState(ctx, st, opts, ApplyResult{}), nil
}

// withState records in res the state the apply left: `terraform state
// pull` through the same backend, read by ReadStateRecord. A failure is
// recorded as StateError, never an error of the apply, which is done.
func withState(ctx context.Context, st *stack, opts ApplyOptions, res ApplyResult) ApplyResult {
	if opts.Backend == BackendHTTP {
		// What `terraform state pull` would ask the state server, asked
		// here: one request instead of a terraform process that loads the
		// stack and its backend again. Anything unexpected asks terraform.
		t0 := time.Now()
		if raw, err := pullHTTPState(ctx, opts.Env); err == nil {
			if rec, err := ReadStateRecord(raw); err == nil {
				opts.Steps.Since("state read", t0)
				res.State = &rec
				return res
			}
		}
	}
	var raw string
	err := opts.run(ctx, st.tf, "state pull", func() error {
		var err error
		raw, err = st.tf.StatePull(ctx)
		return err
	})
	if err == nil {
		var rec StateRecord
		if rec, err = ReadStateRecord([]byte(raw)); err == nil {
			res.State = &rec
			return res
		}
	}
	res.StateError = Redact(err.Error(), opts.secrets())
	return res
}

// inPlace (lock "" plans without the state lock) reports whether a fresh plan of the stack, with the variables the
// stale plan file was made with, has no changes: the approved
// configuration is already deployed. Any doubt (a variable it cannot pass
// on, a failing plan) is false.
func inPlace(ctx context.Context, st *stack, opts ApplyOptions, planFile, lock string) bool {
	var plan *tfjson.Plan
	err := opts.run(ctx, st.tf, "show", func() error {
		var err error
		plan, err = st.tf.ShowPlanFile(ctx, planFile)
		return err
	})
	if err != nil || plan == nil {
		return false
	}
	planOpts := []tfexec.PlanOption{tfexec.Destroy(planIsDestroy(plan))}
	if lock == "" {
		// Only looking: a lock an interrupted run left behind must not
		// stop the look, and a plan writes no state.
		planOpts = append(planOpts, tfexec.Lock(false))
	} else {
		planOpts = append(planOpts, tfexec.LockTimeout(lock))
	}
	vars, err := planVars(plan)
	if err != nil {
		return false
	}
	for _, v := range vars {
		planOpts = append(planOpts, v)
	}
	var changes bool
	err = opts.run(ctx, st.tf, "plan", func() error {
		var err error
		changes, err = st.tf.Plan(ctx, planOpts...)
		return err
	})
	return err == nil && !changes
}

// planVars are the -var options that give a new plan the variables a
// saved plan was made with (its JSON's "variables"), sorted by name. A
// variable without a value is an error: the new plan could not have the
// same ones.
func planVars(plan *tfjson.Plan) ([]*tfexec.VarOption, error) {
	names := make([]string, 0, len(plan.Variables))
	for k := range plan.Variables {
		names = append(names, k)
	}
	sort.Strings(names)
	out := make([]*tfexec.VarOption, 0, len(names))
	for _, k := range names {
		v := plan.Variables[k]
		if v == nil || v.Value == nil {
			return nil, fmt.Errorf("the plan records no value for variable %q", k)
		}
		switch val := v.Value.(type) {
		case string:
			out = append(out, tfexec.Var(k+"="+val))
		default:
			b, err := json.Marshal(val)
			if err != nil {
				return nil, fmt.Errorf("variable %q: %w", k, err)
			}
			out = append(out, tfexec.Var(k+"="+string(b)))
		}
	}
	return out, nil
}

// planIsDestroy reports whether the plan was made in destroy mode.
func planIsDestroy(p *tfjson.Plan) bool {
	for _, rc := range p.ResourceChanges {
		if rc.Change == nil || !rc.Change.Actions.Delete() {
			return false
		}
	}
	return len(p.ResourceChanges) > 0
}

// isStale recognises terraform's refusal of a plan whose prior state is no
// longer the current one.
func isStale(e *RunError) bool {
	for _, d := range e.Details {
		if strings.Contains(strings.ToLower(d.Summary), "saved plan is stale") {
			return true
		}
	}
	return strings.Contains(strings.ToLower(e.Stderr), "saved plan is stale")
}
