package drift_test

// kubectl sluice audit against releases installed for real by the
// operator's gate and Helm applier (the plugin lives in internal/plugin;
// its own tests run with the admission policies, which would refuse this
// fixture's hand-made ChangeRequests).

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/drift"
	"github.com/sluice-gitops/sluice/operator/internal/drift/drifttest"
	"github.com/sluice-gitops/sluice/operator/internal/plugin"
)

func audit(t *testing.T, f *drifttest.Fixture, args ...string) ([]plugin.Attestation, string, error) {
	t.Helper()
	env, _ := drift.SharedEnv()
	var out, errOut bytes.Buffer
	err := plugin.Run(context.Background(), append([]string{"audit", "-n", f.Ctl}, args...), &out, &errOut, env.Config)
	var table bytes.Buffer
	_ = plugin.Run(context.Background(), []string{"audit", "-n", f.Ctl}, &table, &errOut, env.Config)
	var ats []plugin.Attestation
	require.NoError(t, json.Unmarshal(out.Bytes(), &ats), out.String())
	return ats, table.String(), err
}

func TestAudit_provesACleanReleaseAndFlagsAHandEditAndADeletedApproval(t *testing.T) {
	env, server := drift.SharedEnv()
	f := drifttest.New(t, env, server, sluicev1.DriftOff)
	f.Start()
	applied := f.ApplyFirst()

	ats, table, err := audit(t, f, "-o", "json")
	require.NoError(t, err, table)
	require.Len(t, ats, 1)
	at := ats[0]
	require.Equal(t, plugin.AuditProven, at.Result, at.Evidence)
	require.Equal(t, applied.Name, at.Change)
	require.Equal(t, applied.Spec.Revision, at.Revision)
	require.Equal(t, string(applied.Spec.ApprovalDigest), at.Digests.Approval)
	require.Equal(t, string(applied.Spec.ManifestDigest), at.Digests.Manifest)
	require.Len(t, at.Approvers, 1)
	require.Equal(t, "k8s:alice", at.Approvers[0].Identity)
	require.NotEmpty(t, at.Approvers[0].At)
	require.NotNil(t, at.Rule)
	require.Equal(t, int32(1), at.Rule.Required)
	require.Equal(t, sluicev1.ReasonApprovalsMet, at.GateReason)
	require.Contains(t, table, "web-staging")
	require.Contains(t, table, "proven")

	// A kubectl edit of the image: drifted, and a non-zero exit.
	f.EditImage()
	ats, table, err = audit(t, f, "-o", "json")
	require.Error(t, err)
	require.Equal(t, plugin.AuditDrifted, ats[0].Result, ats[0].Evidence)
	require.Contains(t, table, "spec.template.spec.containers[name=web].image")

	// The Approval deleted after the apply (its finalizer removed by
	// someone with the rights): the change is no longer proven approved.
	var approvals sluicev1.ApprovalList
	require.NoError(t, env.Client.List(context.Background(), &approvals, client.InNamespace(f.Ctl)))
	require.Len(t, approvals.Items, 1)
	a := &approvals.Items[0]
	orig := a.DeepCopy()
	a.Finalizers = nil
	require.NoError(t, env.Client.Patch(context.Background(), a, client.MergeFrom(orig)))
	require.NoError(t, client.IgnoreNotFound(env.Client.Delete(context.Background(), a)))
	ats, table, err = audit(t, f, "-o", "json")
	require.Error(t, err)
	require.Equal(t, plugin.AuditUnapproved, ats[0].Result, ats[0].Evidence)
	require.Contains(t, table, "unapproved")
}
