package terraform

import (
	"context"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// Chain returns the applier for a delivery mode when Terraform is applied
// too: a change with a plan gets it applied by tf first (infrastructure
// before the workloads that use it), then the change goes to next, unless
// the change's source names no chart and the change has no manifests (a Terraform-only
// service). A change without a plan goes straight to next.
//
// Its name is next's; cleanup on Release deletion is next's (the Terraform
// state is left in place: a destroy is a change of its own, DESIGN.md §4).
func Chain(tf *Applier, next applier.Applier) applier.Applier {
	c := &chain{tf: tf, next: next}
	if cl, ok := next.(applier.Cleaner); ok {
		return &cleaningChain{chain: c, cleaner: cl}
	}
	return c
}

type chain struct {
	tf   *Applier
	next applier.Applier
}

func (c *chain) Name() string { return c.next.Name() }

func (c *chain) Apply(ctx context.Context, req applier.Request) (applier.Result, error) {
	if req.Change == nil || !HasPlan(req.Change) {
		return c.next.Apply(ctx, req)
	}
	tfRes, err := c.tf.Apply(ctx, req)
	if err != nil {
		return applier.Result{}, err
	}
	if req.Change.Spec.ManifestDigest == "" && !hasChart(req.Change) {
		c.tf.Forget(req.Change)
		return tfRes, nil
	}
	res, err := c.next.Apply(ctx, req)
	if _, permanent := applier.AsFailure(err); err == nil || permanent {
		// The change's outcome is settled: nothing to remember for a retry.
		c.tf.Forget(req.Change)
	}
	if err != nil {
		return applier.Result{}, err
	}
	res.Message = tfRes.Message + "; " + res.Message
	res.Terraform = tfRes.Terraform
	return res, nil
}

// hasChart reports whether the change's source names a chart (the
// approved change, not the Release's spec, says what is applied).
func hasChart(cr *sluicev1.ChangeRequest) bool {
	src := cr.SourceOf()
	return src != nil && src.Chart.IsSet()
}

// cleaningChain is a chain whose next applier cleans up after a Release.
type cleaningChain struct {
	*chain
	cleaner applier.Cleaner
}

func (c *cleaningChain) Cleanup(ctx context.Context, r applier.Removal, repo *sluicev1.Repository) (applier.Result, error) {
	return c.cleaner.Cleanup(ctx, r, repo)
}
