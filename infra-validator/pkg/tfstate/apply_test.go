package tfstate_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	tfrun "github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate/tfstatetest"
)

// TestApply_readsTheStateItLeftFromTheStateServerWithoutTerraform: an
// apply through the runner with the http backend records the state it
// left (lineage, serial, resources) by asking the state server itself, not
// with one more terraform process (`terraform state pull`), and what it
// records is the state the server stored.
func TestApply_readsTheStateItLeftFromTheStateServerWithoutTerraform(t *testing.T) {
	ns := newNamespace(t)
	s := newStateServer(t, tfstate.Options{})
	g := tfstate.Grant{Namespace: ns, Release: "cache-prod"}
	dir := stack(t, "")
	ctx := context.Background()
	local := &runner.Local{}

	g.Mode = tfstate.ModePlan
	planCred := tfstatetest.Grant(t, s.Server, g)
	plan, err := tfrun.Plan(ctx, tfrun.PlanOptions{
		ExecOptions: tfrun.ExecOptions{Runner: local, Env: planCred.Env(), Secrets: planCred.Secrets()},
		Dir:         dir, Backend: tfrun.BackendHTTP, Vars: map[string]string{"v": "one"},
	})
	if err != nil {
		t.Fatal(err)
	}
	g.Mode = tfstate.ModeApply
	applyCred := tfstatetest.Grant(t, s.Server, g)
	steps := &tfrun.Steps{}
	res, err := tfrun.Apply(ctx, tfrun.ApplyOptions{
		ExecOptions: tfrun.ExecOptions{Runner: local, Env: applyCred.Env(), Secrets: applyCred.Secrets(), Steps: steps},
		Dir:         dir, PlanFile: plan.PlanFile, PlanFileSHA256: plan.Report.PlanFileSHA256, Backend: tfrun.BackendHTTP,
	})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, st := range steps.List() {
		names = append(names, st.Name)
	}
	if !slices.Contains(names, "state read") || slices.Contains(names, "state pull") {
		t.Errorf("the apply's steps are %v: want the state read from the server (\"state read\"), no `terraform state pull`", names)
	}
	stored, sec := secretState(t, ns, "tfstate-default-cache-prod")
	if res.State == nil {
		t.Fatalf("no state recorded (%s)", res.StateError)
	}
	if res.State.Lineage != stored.Lineage || res.State.Serial != stored.Serial || res.State.Resources != 1 {
		t.Fatalf("recorded state %+v; the server stored lineage %s serial %d", res.State, stored.Lineage, stored.Serial)
	}
	raw, err := gunzip(sec.Data["tfstate"])
	if err != nil {
		t.Fatal(err)
	}
	if want, err := tfrun.StateResourcesDigest(raw); err != nil || res.State.ResourcesDigest != want {
		t.Fatalf("recorded resources digest %s, the stored state's %s (%v)", res.State.ResourcesDigest, want, err)
	}
}
