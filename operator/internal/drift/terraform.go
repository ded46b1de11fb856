package drift

import (
	"context"
	"fmt"
	"sort"

	tfjson "github.com/hashicorp/terraform-json"

	tf "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// TerraformKind is the Kind of a drifted Terraform resource in a
// Release's status (its Name is the resource address).
const TerraformKind = "terraform"

// maxDriftFields is how many changed fields one drifted object lists.
const maxDriftFields = 20

// ApplyPlanner plans the configuration of a release's applied change,
// with the variables of its approved plan file, against its current state
// (*terraform.Applier's PlanApplied: the applier's runner, state server
// and artifact fetcher, with a plan credential that can read and lock the
// state, never write it).
type ApplyPlanner interface {
	PlanApplied(ctx context.Context, rel *applier.ReleaseRef, repo *sluicev1.Repository, cr *sluicev1.ChangeRequest) (*tf.PlanResult, error)
}

// TerraformChecker reports drift of a release's Terraform state: it
// plans the last applied change's configuration (a normal plan, not a
// refresh-only one: a resource whose arguments were changed in state by
// another terraform run shows up only when the configuration is compared
// with it) and reports every resource the plan would change.
type TerraformChecker struct {
	Planner ApplyPlanner
}

// Check implements Checker.
func (c *TerraformChecker) Check(ctx context.Context, rel *sluicev1.Release, repo *sluicev1.Repository, applied *sluicev1.ChangeRequest) (Report, error) {
	res, err := c.Planner.PlanApplied(ctx, applier.ReleaseOf(rel), repo, applied)
	if err != nil {
		return Report{}, err
	}
	if res == nil || res.Plan == nil {
		return Report{}, fmt.Errorf("the plan of %s produced no plan", applied.Name)
	}
	return TerraformDrift(res.Plan), nil
}

// TerraformDrift turns a plan of the applied configuration into drifted
// objects: a resource the plan would create is gone from the state
// (removed), one it would delete is not in the configuration (added), one
// it would update or replace changed. Fields are the top-level attribute
// names whose values differ; values are never reported, so sensitive
// ones never show.
func TerraformDrift(p *tfjson.Plan) Report {
	var rep Report
	for _, rc := range p.ResourceChanges {
		if rc == nil || rc.Change == nil || rc.Mode == tfjson.DataResourceMode {
			continue
		}
		rep.Checked++
		a := rc.Change.Actions
		var change sluicev1.DriftChange
		switch {
		case a.NoOp() || a.Read() || len(a) == 0:
			continue
		case a.Create():
			change = sluicev1.DriftRemoved
		case a.Delete():
			change = sluicev1.DriftAdded
		default:
			change = sluicev1.DriftChanged
		}
		o := sluicev1.DriftedObject{Kind: TerraformKind, Name: rc.Address, Change: change}
		if change == sluicev1.DriftChanged {
			o.Fields = changedAttributes(rc.Change.Before, rc.Change.After, rc.Change.AfterUnknown)
		}
		rep.Objects = append(rep.Objects, o)
	}
	return rep
}

// changedAttributes lists the top-level attribute names whose values
// differ between before and after (or are unknown until apply), sorted,
// at most maxDriftFields.
func changedAttributes(before, after, unknown any) []string {
	b, _ := before.(map[string]any)
	a, _ := after.(map[string]any)
	u, _ := unknown.(map[string]any)
	names := map[string]bool{}
	for k := range b {
		names[k] = true
	}
	for k := range a {
		names[k] = true
	}
	for k := range u {
		names[k] = true
	}
	var out []string
	for k := range names {
		if isUnknown(u[k]) || fmt.Sprint(b[k]) != fmt.Sprint(a[k]) {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) > maxDriftFields {
		out = out[:maxDriftFields]
	}
	return out
}

func isUnknown(v any) bool {
	switch u := v.(type) {
	case bool:
		return u
	case map[string]any:
		for _, e := range u {
			if isUnknown(e) {
				return true
			}
		}
	case []any:
		for _, e := range u {
			if isUnknown(e) {
				return true
			}
		}
	}
	return false
}
