package helm

import (
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	tfapplier "github.com/sluice-gitops/sluice/operator/internal/applier/terraform"
	"github.com/sluice-gitops/sluice/operator/internal/controller"
)

// ownKind tells a kind the operator's cache may hold: the Sluice kinds,
// Namespaces as metadata only (their labels select approval policies), and
// Pods selected by the Helm instance label (the Release's Degraded
// condition reads its workload's pods), never all of them.
func ownKind(k controller.CachedKind) bool {
	return k.Group == sluicev1.GroupVersion.Group || (k.Group == "" && k.Kind == "Namespace" && k.MetadataOnly) ||
		(k.Group == "" && k.Kind == "Pod" && k.Selector == "app.kubernetes.io/instance")
}

// TestManager_cachesOnlyTheOperatorsOwnKinds runs the operator's manager as
// cmd/operator builds it (the Helm applier behind the Terraform applier,
// whose state lives in Secrets) through a full apply and an approved
// Delete, then lists the kinds its cache holds an informer for: no Secret,
// nothing of the tenants' (the chart's ConfigMaps, Deployments...), only
// what the operator owns. An informer is a cluster- or namespace-wide watch
// and a copy of every object of its kind in the operator's memory.
func TestManager_cachesOnlyTheOperatorsOwnKinds(t *testing.T) {
	f := newDeleteFixture(t)
	reg := applier.Registry{sluicev1.DeliveryHelm: newApplier(t)}
	ctx := t.Context()
	flags := tfapplier.Flags{Apply: true, StateAddr: "127.0.0.1:0"}
	require.NoError(t, flags.Register(ctx, reg, env.Config, server.BaseURL(), logr.Discard()))
	mgr, err := controller.NewManager(ctx, env.Config, controller.ManagerOptions{
		Options:     controller.Options{Appliers: reg, LockRetryInterval: time.Second, SkipNameValidation: true},
		MetricsAddr: "0", ProbeAddr: "0", PprofAddr: "0",
		Namespaces: []string{f.ctl},
	})
	require.NoError(t, err)
	run := testenv.Go(t, mgr).FailOnError(t)
	defer func() { require.NoError(t, run.Stop()) }()

	applied := f.applied()
	del := f.proposeDelete(applied)
	f.waitPhase(del, sluicev1.PhaseAwaitingApproval)
	f.approve(del)
	f.waitPhase(del, sluicev1.PhaseApplied)
	require.Eventually(t, f.releaseGone, time.Minute, 50*time.Millisecond, "the Release is deleted after the Delete change")

	kinds := controller.CachedKinds(mgr)
	t.Logf("kinds in the operator's cache: %v", kinds)
	require.NotEmpty(t, kinds, "the manager built by NewManager reports its cached kinds")
	for _, k := range kinds {
		require.Truef(t, ownKind(k), "the operator's cache holds an informer for %s, a kind it does not own or more of it than it reads (all: %v)", k, kinds)
	}
	// The unsharded operator holds only the changes without a shard key.
	require.Contains(t, kinds, controller.CachedKind{GroupVersionKind: sluicev1.GroupVersion.WithKind("ChangeRequest"), Selector: "!" + sluicev1.LabelShard})
}
