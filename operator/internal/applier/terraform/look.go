package terraform

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"

	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// PlanApplied plans the configuration of the applied change cr (the
// Terraform stack of its verified artifact, with the variables its
// approved plan file was made with, not the Release's current ones)
// against the release's current state, in the applier's runner with a
// plan credential (ModePlan: read and lock this one state, never write).
// Any resource change in the result is drift: the state no longer holds
// what the approved plan applied. The plan file is read from the change's
// plan Secrets as the Repository's ServiceAccount and must hash to the
// approved planFileSHA256. The drift controller calls it; it shares the
// runner, the state server and the artifact fetcher the applier was
// built with.
func (a *Applier) PlanApplied(ctx context.Context, rel *applier.ReleaseRef, repo *sluicev1.Repository, cr *sluicev1.ChangeRequest) (*tf.PlanResult, error) {
	if cr == nil || rel == nil || repo == nil {
		return nil, applier.Permanent(sluicev1.ReasonInvalidSpec, "no change, release or repository to plan")
	}
	// The stack as the applied change recorded it, not as the Release's
	// spec says after later pushes.
	stack, err := stackOf(cr)
	if err != nil {
		return nil, err
	}
	sa := repo.Spec.ServiceAccountName
	if sa == "" {
		return nil, applier.Permanent(sluicev1.ReasonInvalidSpec, "Repository %s names no serviceAccountName to read the plan as", repo.Name)
	}
	token, err := a.token(ctx, repo.Namespace, sa)
	if err != nil {
		return nil, err
	}
	asSA := rest.AnonymousClientConfig(a.opts.Config)
	asSA.BearerToken = token
	planFile, err := readPlan(ctx, asSA, cr, repo.Namespace+":"+sa)
	if err != nil {
		return nil, fmt.Errorf("the approved plan of %s, whose variables the drift plan uses: %w", cr.Name, err)
	}
	if got := tf.PlanFileSHA256(planFile); got != string(cr.Spec.PlanFileSHA256) {
		return nil, applier.Permanent(sluicev1.ReasonDigestMismatch, "the stored plan file of %s hashes to %s, not the approved %s", cr.Name, got, cr.Spec.PlanFileSHA256)
	}
	content, err := a.opts.Fetcher.FetchChange(ctx, cr)
	if err != nil {
		return nil, err
	}
	defer func() { _ = content.Close() }()
	dir, err := stackDir(content.Dir, string(stack.Dir))
	if err != nil {
		return nil, err
	}
	cred, err := a.grant(cr.Namespace, rel.Name, stack, tfstate.ModePlan)
	if err != nil {
		return nil, fmt.Errorf("no plan credential for the state of release %s: %w", rel.Name, err)
	}
	env := map[string]string{}
	for k, v := range a.opts.Env {
		env[k] = v
	}
	for k, v := range cred.Env() {
		env[k] = v
	}
	res, err := tf.Plan(ctx, tf.PlanOptions{
		ExecOptions:      tf.ExecOptions{Runner: a.opts.Runner, Env: env, Secrets: cred.Secrets(), Timeout: a.opts.Timeout},
		Root:             content.Dir,
		Dir:              dir,
		VarsFromPlanFile: planFile,
		Workspace:        stack.Workspace,
		Backend:          tf.BackendHTTP,
	})
	if err != nil {
		return nil, fmt.Errorf("plan the applied configuration of %s: %w", cr.Name, err)
	}
	return res, nil
}
