// Package terraform applies the approved Terraform plan file of a change
// (DESIGN.md §5): never a fresh plan, always the very file whose sha256 was
// approved, against the state the syncer planned with (Terraform's
// state server serves the kubernetes backend's Secrets in the control
// namespace, suffix = the Release, through Terraform's http backend).
//
// One Apply runs these steps, and stops at the first that fails:
//
//  1. the change records a plan file digest and its Release a stack;
//  2. a short-lived token for the Repository's ServiceAccount is requested
//     (TokenRequest): terraform and the plan reads use it, so they have that
//     ServiceAccount's rights and never the operator's;
//  3. as the ServiceAccount, the plan Secrets "<change>-plan", "-plan-1"…
//     are read from the control namespace;
//  4. the artifact is downloaded, verified (archive, content and approval
//     digests) and extracted;
//  5. a run credential for the release's state (package tfstate,
//     ModeApply: this one state, read, lock and write, for one hour) is
//     granted;
//  6. terraform init with the http backend, then terraform apply of the
//     plan file after its sha256 is checked (infra-validator's
//     terraform.Apply), in a runner (package runner) that holds the run
//     credential and the configured provider settings, and nothing of the
//     operator or the ServiceAccount.
//
// A runner lost mid-apply (killed, restarted) may have applied the plan:
// the retry only looks (a plan of the approved configuration, without
// the lock) and the change ends Applied (in place) or StalePlan, so a
// plan is never applied twice by this process.
//
// A plan the state has moved past applies nothing: when a fresh look (a
// plan of the approved configuration with the plan's variables) finds
// nothing to change, the approved configuration is already in place (an
// operator restarted after terraform finished) and the change counts as
// applied; otherwise it fails with StalePlan, and a re-plan (the Release's
// gitops.sluice.dev/replan annotation) makes a new change for a new
// approval.
//
// Chain puts this applier in front of the delivery applier: a change with
// a plan gets its Terraform applied first, then its manifests.
package terraform

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/artifact"
)

// Name is the applier's name in messages.
const Name = "terraform"

// DefaultTokenTTL is how long the ServiceAccount token the plan Secrets
// are read with is valid (the API server's minimum is 10 minutes).
const DefaultTokenTTL = time.Hour

// StateGranter hands out run credentials for one release's state
// (*tfstate.Server).
type StateGranter interface {
	Grant(g tfstate.Grant) (tfstate.Credential, error)
	// Revoke ends a credential whose run is known dead, freeing its lock.
	Revoke(ctx context.Context, c tfstate.Credential) error
}

// Options configure the Terraform applier.
type Options struct {
	// Config is the operator's own connection: it requests the
	// ServiceAccount tokens and says where the API server is. Its
	// credentials never reach terraform.
	Config *rest.Config
	// Fetcher downloads and verifies artifacts.
	Fetcher *artifact.Fetcher
	// Runner runs terraform (a runner.Local child or a runner.Remote).
	Runner tf.Runner
	// State grants the run credential of each apply.
	State StateGranter
	// Env is added to terraform's environment in the runner (cloud
	// credentials, provider mirror settings), and redacted from every
	// message. TF_HTTP_* are the run credential's.
	Env map[string]string
	// Timeout bounds one terraform apply; zero means the validator's
	// terraform.DefaultTimeout.
	Timeout time.Duration
	// TokenTTL is the lifetime of the ServiceAccount token the plan is read
	// with; zero means DefaultTokenTTL. The run credential lives Timeout
	// plus 5 minutes.
	TokenTTL time.Duration
	// Log receives progress at V(1).
	Log logr.Logger
}

// Applier applies approved Terraform plan files.
type Applier struct {
	opts    Options
	clients kubernetes.Interface
	// applied remembers the plans this process applied (change UID and plan
	// digest) until the change's outcome is known (Forget), so a retry after
	// a later step failed does not plan again; terraform itself would refuse
	// the spent plan, and the in-place check would find it applied.
	applied sync.Map
	// interrupted remembers the plans whose runner was lost mid-apply:
	// they may have been applied, so a retry only looks.
	interrupted sync.Map
}

var _ applier.Applier = (*Applier)(nil)

// New checks the options and returns the applier.
func New(opts Options) (*Applier, error) {
	if opts.Config == nil {
		return nil, errors.New("terraform applier: no rest config")
	}
	if opts.Fetcher == nil {
		return nil, errors.New("terraform applier: no artifact fetcher")
	}
	if opts.Runner == nil {
		return nil, errors.New("terraform applier: no terraform runner")
	}
	if opts.State == nil {
		return nil, errors.New("terraform applier: no state server")
	}
	if opts.TokenTTL == 0 {
		opts.TokenTTL = DefaultTokenTTL
	}
	if opts.TokenTTL < 10*time.Minute {
		return nil, fmt.Errorf("terraform applier: token lifetime %s is below the API server's minimum of 10m", opts.TokenTTL)
	}
	for k := range opts.Env {
		if strings.HasPrefix(k, "TF_HTTP_") {
			return nil, fmt.Errorf("terraform applier: %s is the run credential's, set by the applier", k)
		}
	}
	cs, err := kubernetes.NewForConfig(opts.Config)
	if err != nil {
		return nil, fmt.Errorf("terraform applier: %w", err)
	}
	return &Applier{opts: opts, clients: cs}, nil
}

// Name implements applier.Applier.
func (a *Applier) Name() string { return Name }

// HasPlan reports whether a change carries a Terraform plan to apply.
func HasPlan(cr *sluicev1.ChangeRequest) bool { return cr.Spec.PlanFileSHA256 != "" }

// +kubebuilder:rbac:groups="",resources=serviceaccounts/token,verbs=create

// Apply implements applier.Applier: it applies the change's plan file.
func (a *Applier) Apply(ctx context.Context, req applier.Request) (applier.Result, error) {
	cr, rel, repo := req.Change, req.Release, req.Repository
	if cr == nil || rel == nil || repo == nil {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the request has no change, release or repository")
	}
	if !sluicev1.ValidDigest(string(cr.Spec.PlanFileSHA256)) {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "the change records no valid planFileSHA256, so no plan file can be checked against it")
	}
	stack, err := stackOf(cr)
	if err != nil {
		return applier.Result{}, err
	}
	key := appliedKey(cr)
	if done, ok := a.applied.Load(key); ok {
		res, _ := done.(applier.Result)
		res.Message = "terraform plan already applied"
		return res, nil
	}
	log := a.opts.Log.WithValues("change", cr.Namespace+"/"+cr.Name, "stack", string(stack.Dir))

	sa := repo.Spec.ServiceAccountName
	if sa == "" {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "Repository %s names no serviceAccountName to apply as", repo.Name)
	}
	token, err := a.token(ctx, repo.Namespace, sa)
	if err != nil {
		return applier.Result{}, err
	}
	asSA := rest.AnonymousClientConfig(a.opts.Config)
	asSA.BearerToken = token
	plan, err := readPlan(ctx, asSA, cr, repo.Namespace+":"+sa)
	if err != nil {
		return applier.Result{}, err
	}

	content, err := a.opts.Fetcher.FetchChange(ctx, cr)
	if err != nil {
		return applier.Result{}, err
	}
	defer func() { _ = content.Close() }()
	dir, err := stackDir(content.Dir, string(stack.Dir))
	if err != nil {
		return applier.Result{}, err
	}

	cred, err := a.grant(cr.Namespace, rel.Name, stack, tfstate.ModeApply)
	if err != nil {
		return applier.Result{}, applier.Permanent(sluicev1.ReasonInvalidSpec, "no state credential for release %s: %v", rel.Name, err)
	}
	env := map[string]string{}
	for k, v := range a.opts.Env {
		env[k] = v
	}
	for k, v := range cred.Env() {
		env[k] = v
	}

	_, lookOnly := a.interrupted.Load(key)
	log.V(1).Info("Applying the approved plan file", "planFileSHA256", cr.Spec.PlanFileSHA256, "lookOnly", lookOnly)
	start := time.Now()
	res, err := tf.Apply(ctx, tf.ApplyOptions{
		ExecOptions:    tf.ExecOptions{Runner: a.opts.Runner, Env: env, Secrets: cred.Secrets(), Timeout: a.opts.Timeout},
		Root:           content.Dir,
		Dir:            dir,
		PlanFile:       plan,
		PlanFileSHA256: string(cr.Spec.PlanFileSHA256),
		Workspace:      stack.Workspace,
		Backend:        tf.BackendHTTP,
		LookOnly:       lookOnly,
	})
	if errors.Is(err, tf.ErrRunnerLost) {
		// The runner may have applied the plan before it went: from now
		// on, only look.
		a.interrupted.Store(key, struct{}{})
		if _, local := a.opts.Runner.(*runner.Local); local {
			// A local child is known dead (its process group was
			// killed): free its lock now, not when the credential
			// expires. A runner workload may still be applying, so its
			// lock stays until then.
			if rerr := a.opts.State.Revoke(context.WithoutCancel(ctx), cred); rerr != nil {
				log.Error(rerr, "Freeing the state lock of a lost terraform run failed; it frees when the run's credential expires")
			}
		}
		return applier.Result{}, fmt.Errorf("terraform apply: %w", err)
	}
	if err != nil {
		if errors.Is(err, tf.ErrStalePlan) || isPermanent(err) {
			a.interrupted.Delete(key)
		}
		return applier.Result{}, explain(err)
	}
	a.interrupted.Delete(key)
	out := applier.Result{Terraform: stateResult(res.State)}
	if res.InPlace {
		log.V(1).Info("The approved configuration is already in place", "duration", time.Since(start).Round(time.Millisecond).String())
		out.Message = "terraform: the approved configuration of plan " + short(string(cr.Spec.PlanFileSHA256)) + " is already in place (applied before), nothing applied"
	} else {
		log.V(1).Info("Plan applied", "duration", time.Since(start).Round(time.Millisecond).String())
		out.Message = "terraform applied plan " + short(string(cr.Spec.PlanFileSHA256))
	}
	if out.Terraform != nil {
		out.Message += fmt.Sprintf(" (state serial %d)", out.Terraform.Serial)
	} else {
		// The apply is done; only the record for audit is missing.
		why := res.StateError
		if why == "" {
			why = "its lineage or serial is out of range"
		}
		log.Info("The state the apply left could not be recorded; audit will not prove this change", "error", why)
		out.Message += "; the state it left could not be recorded (" + why + "), so audit cannot prove it"
	}
	a.applied.Store(key, out)
	return out, nil
}

// stackOf is the Terraform stack a change with a plan acts on, from the
// change only (see sluicev1.ChangeRequest.StackOf): a change without a
// source, or whose source names no stack, fails with InvalidSpec.
func stackOf(cr *sluicev1.ChangeRequest) (*sluicev1.TerraformSource, error) {
	if cr.IsDelete() && cr.Spec.Deletion != nil && cr.Spec.Deletion.Terraform != nil {
		return stackOrInvalid(cr.Spec.Deletion.Terraform)
	}
	src, err := applier.SourceOf(cr)
	if err != nil {
		return nil, err
	}
	return stackOrInvalid(src.Terraform)
}

func stackOrInvalid(t *sluicev1.TerraformSource) (*sluicev1.TerraformSource, error) {
	if t == nil || t.Dir == "" {
		return nil, applier.Permanent(sluicev1.ReasonInvalidSpec, "the change has a plan, but its source names no Terraform stack")
	}
	return t, nil
}

// stateResult is the API's record of the state an apply left; nil for none.
func stateResult(s *tf.StateRecord) *sluicev1.TerraformApplyResult {
	if s == nil || !sluicev1.ValidDigest(s.ResourcesDigest) || s.Serial > math.MaxInt64 || s.Lineage == "" || len(s.Lineage) > 64 {
		return nil
	}
	return &sluicev1.TerraformApplyResult{Lineage: s.Lineage, Serial: int64(s.Serial), ResourcesDigest: sluicev1.Digest(s.ResourcesDigest), Resources: int32(min(s.Resources, math.MaxInt32))}
}

// Forget drops what Apply remembers of cr, once the change's outcome no
// longer depends on it.
func (a *Applier) Forget(cr *sluicev1.ChangeRequest) {
	a.applied.Delete(appliedKey(cr))
	a.interrupted.Delete(appliedKey(cr))
}

// isPermanent reports whether explain makes err a failure of the change.
func isPermanent(err error) bool {
	_, permanent := applier.AsFailure(explain(err))
	return permanent
}

func appliedKey(cr *sluicev1.ChangeRequest) string {
	return string(cr.UID) + "/" + string(cr.Spec.PlanFileSHA256)
}

// token requests a short-lived token for the ServiceAccount namespace/name.
func (a *Applier) token(ctx context.Context, namespace, name string) (string, error) {
	tr, err := a.clients.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(a.opts.TokenTTL / time.Second))},
	}, metav1.CreateOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", applier.Permanent(sluicev1.ReasonApplyFailed, "ServiceAccount %s/%s does not exist (the Repository's serviceAccountName)", namespace, name)
	case err != nil:
		return "", fmt.Errorf("request a token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// readPlan reads and joins the plan Secrets of cr as the ServiceAccount.
func readPlan(ctx context.Context, cfg *rest.Config, cr *sluicev1.ChangeRequest, who string) ([]byte, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	var plan []byte
	for i := 0; ; i++ {
		name := sluicev1.PlanSecretName(cr.Name, i)
		s, err := cs.CoreV1().Secrets(cr.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err) && i > 0:
			return plan, nil
		case apierrors.IsNotFound(err):
			return nil, applier.Permanent(sluicev1.ReasonDigestMismatch, "the plan Secret %s is missing, so the approved plan cannot be applied", name)
		case apierrors.IsForbidden(err):
			return nil, applier.Permanent(sluicev1.ReasonApplyFailed,
				"%s may not read the plan Secret %s in namespace %s (give it a Role there for secrets and coordination.k8s.io leases: Terraform's state lives there too)", who, name, cr.Namespace)
		case err != nil:
			return nil, fmt.Errorf("read plan Secret %s: %w", name, err)
		}
		if s.Type != corev1.SecretTypeOpaque || len(s.Data[sluicev1.PlanSecretKey]) == 0 {
			return nil, applier.Permanent(sluicev1.ReasonDigestMismatch, "the plan Secret %s holds no plan file", name)
		}
		plan = append(plan, s.Data[sluicev1.PlanSecretKey]...)
	}
}

// stackDir is the stack folder inside the extracted artifact; the path
// must stay inside it.
func stackDir(root, dir string) (string, error) {
	p := filepath.Join(root, filepath.FromSlash(dir))
	if rel, err := filepath.Rel(root, p); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) || filepath.IsAbs(dir) {
		return "", applier.Permanent(sluicev1.ReasonInvalidSpec, "the Terraform stack %q leaves the artifact", dir)
	}
	fi, err := os.Lstat(p)
	if err != nil || !fi.IsDir() {
		return "", applier.Permanent(sluicev1.ReasonInvalidSpec, "the artifact has no Terraform stack folder %q", dir)
	}
	return p, nil
}

// explain turns a terraform.Apply error into an applier error: permanent
// when retrying cannot help, returned as is (retried) otherwise.
func explain(err error) error {
	var runErr *tf.RunError
	switch {
	case errors.Is(err, tf.ErrStalePlan):
		return &applier.Failure{Reason: sluicev1.ReasonStalePlan,
			Message: "the Terraform state changed after this plan was made, so terraform applied nothing; ask for a re-plan (annotate the Release " + sluicev1.AnnotationReplan + ") and approve the new change",
			Err:     err}
	case errors.Is(err, tf.ErrPlanFileMismatch):
		return &applier.Failure{Reason: sluicev1.ReasonDigestMismatch, Message: "the stored plan file is not the approved one", Err: err}
	case errors.As(err, &runErr) && runErr.Kind == tf.ErrorConfiguration:
		return &applier.Failure{Reason: sluicev1.ReasonApplyFailed, Message: "terraform " + runErr.Step + " failed", Err: err}
	case errors.As(err, &runErr) && runErr.Step == "apply" && !lockOnly(runErr):
		// Resources may be half-created: the plan is spent either way,
		// a retry could only find it stale.
		return &applier.Failure{Reason: sluicev1.ReasonApplyFailed, Message: "terraform apply failed part-way; the state holds what was done, and a re-plan shows the rest", Err: err}
	case errors.As(err, &runErr):
		return err // the backend or the network: retried
	default:
		// The binary is missing, an option is wrong, a folder cannot be
		// made: nothing that a retry of this change fixes on its own, but
		// an operator fix does, so it is retried with backoff and the
		// message shows on the change.
		return err
	}
}

// lockOnly reports whether terraform failed only to take the state lock
// (nothing was applied, a retry is right).
func lockOnly(e *tf.RunError) bool {
	return strings.Contains(strings.ToLower(e.Stderr), "error acquiring the state lock")
}

func short(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	return d[:min(len(d), 12)]
}

// grant is the state credential of one run of stack for release in mode. It
// (and a lock its run leaves behind, should the runner die) lives as long
// as the run may, plus a margin.
func (a *Applier) grant(namespace, release string, stack *sluicev1.TerraformSource, mode tfstate.Mode) (tfstate.Credential, error) {
	ttl := a.opts.Timeout
	if ttl == 0 {
		ttl = tf.DefaultTimeout
	}
	return a.opts.State.Grant(tfstate.Grant{
		Namespace: namespace, Release: release, Workspace: stack.Workspace, Mode: mode, TTL: ttl + 5*time.Minute,
	})
}
