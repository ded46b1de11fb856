package drift

import (
	"testing"

	tfjson "github.com/hashicorp/terraform-json"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestTerraformDrift(t *testing.T) {
	rc := func(addr string, mode tfjson.ResourceMode, before, after, unknown any, actions ...tfjson.Action) *tfjson.ResourceChange {
		return &tfjson.ResourceChange{Address: addr, Mode: mode, Change: &tfjson.Change{Actions: actions, Before: before, After: after, AfterUnknown: unknown}}
	}
	plan := &tfjson.Plan{ResourceChanges: []*tfjson.ResourceChange{
		rc("terraform_data.same", tfjson.ManagedResourceMode, map[string]any{"input": "a"}, map[string]any{"input": "a"}, nil, tfjson.ActionNoop),
		rc("data.terraform_remote_state.x", tfjson.DataResourceMode, nil, map[string]any{"a": 1}, nil, tfjson.ActionRead),
		rc("terraform_data.gone", tfjson.ManagedResourceMode, nil, map[string]any{"input": "a"}, nil, tfjson.ActionCreate),
		rc("terraform_data.extra", tfjson.ManagedResourceMode, map[string]any{"input": "a"}, nil, nil, tfjson.ActionDelete),
		rc("terraform_data.edited", tfjson.ManagedResourceMode,
			map[string]any{"input": "secret-1", "id": "x", "nested": map[string]any{"a": 1}},
			map[string]any{"input": "secret-2", "id": "x", "nested": map[string]any{"a": 1}},
			map[string]any{"output": true, "nested": map[string]any{"a": false}}, tfjson.ActionUpdate),
		rc("terraform_data.replaced", tfjson.ManagedResourceMode, map[string]any{"input": "a"}, map[string]any{"input": "b"}, nil, tfjson.ActionDelete, tfjson.ActionCreate),
	}}
	rep := TerraformDrift(plan)
	require.Equal(t, 5, rep.Checked, "data sources are not drift")
	require.Equal(t, []sluicev1.DriftedObject{
		{Kind: TerraformKind, Name: "terraform_data.gone", Change: sluicev1.DriftRemoved},
		{Kind: TerraformKind, Name: "terraform_data.extra", Change: sluicev1.DriftAdded},
		{Kind: TerraformKind, Name: "terraform_data.edited", Change: sluicev1.DriftChanged, Fields: []string{"input", "output"}},
		{Kind: TerraformKind, Name: "terraform_data.replaced", Change: sluicev1.DriftChanged, Fields: []string{"input"}},
	}, rep.Objects)
	require.NotContains(t, Summary("c", rep.Objects), "secret-", "values are never reported")
}
