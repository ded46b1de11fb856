package admission_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// kubectl delete release by a user with RBAC delete rights is refused: a
// release goes only through an approved Delete ChangeRequest, which the
// operator carries out. A member of a break-glass group may; so may the
// operator.
func TestReleaseDelete_onlyTheOperatorAndBreakGlassGroupsMayDeleteARelease(t *testing.T) {
	ctx := context.Background()
	newRelease := func() *sluicev1.Release {
		rel := release()
		require.NoError(t, syncer.Create(ctx, rel))
		return rel
	}
	rel := newRelease()
	// The policy is enforced a moment after it is installed.
	var err error
	require.Eventually(t, func() bool {
		err = alice.Delete(ctx, rel, client.DryRunAll)
		return err != nil && apierrors.IsInvalid(err) || apierrors.IsForbidden(err)
	}, time.Minute, 200*time.Millisecond, "alice's delete is refused")
	require.Contains(t, err.Error(), "approved Delete ChangeRequest")
	require.Contains(t, err.Error(), "alice")
	require.Error(t, alice.Delete(ctx, rel), "not even for real")
	require.Error(t, syncer.Delete(ctx, rel), "the syncer proposes deletions, it never deletes")
	require.NoError(t, env.Client.Get(ctx, client.ObjectKeyFromObject(rel), &sluicev1.Release{}), "the Release is still there")

	require.NoError(t, bob.Delete(ctx, rel), "bob is in the break-glass group sre")
	require.NoError(t, operator.Delete(ctx, newRelease()), "the operator carries out approved Delete changes")
}
