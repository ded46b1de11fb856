package terraform

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/terraform-exec/tfexec"
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
}

// Apply applies an approved plan file through terraform-exec: it checks the
// file against PlanFileSHA256, initialises the stack with the plan's
// backend, selects the workspace and runs `terraform apply PLANFILE`. It
// never makes a plan of its own. A plan the state has moved past returns
// ErrStalePlan (terraform applied nothing); any other terraform failure is
// a *RunError with terraform's diagnostics. Terraform runs as a child
// process with the environment described on ExecOptions.Env.
func Apply(ctx context.Context, opts ApplyOptions) error {
	if opts.Dir == "" {
		return errors.New("terraform apply: no stack folder given")
	}
	if fi, err := os.Stat(opts.Dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("terraform apply: stack folder %s does not exist", filepath.Base(opts.Dir))
	}
	if opts.Workspace != "" && !wsName.MatchString(opts.Workspace) {
		return fmt.Errorf("terraform apply: workspace %q must match ^[A-Za-z0-9_-]+$", opts.Workspace)
	}
	switch opts.Backend {
	case BackendKubernetes, BackendOwn:
	case "", BackendNone:
		return errors.New("terraform apply: a plan made without a backend (none) was made against an empty state and is never applied")
	default:
		return fmt.Errorf("terraform apply: unknown backend %q (own or kubernetes)", opts.Backend)
	}
	if got := PlanFileSHA256(opts.PlanFile); len(opts.PlanFile) == 0 || got != opts.PlanFileSHA256 {
		return fmt.Errorf("%w: it hashes to %s, %q was approved", ErrPlanFileMismatch, got, opts.PlanFileSHA256)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.timeout())
	defer cancel()
	st, err := openStack(ctx, "terraform apply", opts.ExecOptions, opts.Dir, opts.Backend, opts.Kubernetes, opts.Workspace)
	if err != nil {
		return err
	}
	defer st.close()
	planFile := filepath.Join(st.tmp, "approved.tfplan")
	if err := os.WriteFile(planFile, opts.PlanFile, 0o600); err != nil {
		return fmt.Errorf("terraform apply: %w", err)
	}
	lock := opts.LockTimeout
	if lock == "" {
		lock = DefaultLockTimeout
	}
	err = opts.run(ctx, st.tf, "apply", func() error {
		return st.tf.Apply(ctx, tfexec.DirOrPlan(planFile), tfexec.LockTimeout(lock))
	})
	var runErr *RunError
	if errors.As(err, &runErr) && isStale(runErr) {
		return fmt.Errorf("%w (%s)", ErrStalePlan, runErr.Error())
	}
	return err
}

// isStale recognises terraform's refusal of a plan whose prior state is no
// longer the current one.
func isStale(e *RunError) bool {
	for _, d := range e.Diagnostics {
		if strings.Contains(strings.ToLower(d.Summary), "saved plan is stale") {
			return true
		}
	}
	return strings.Contains(strings.ToLower(e.Stderr), "saved plan is stale")
}
