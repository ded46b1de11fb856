package controller_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/gittest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// TestSync_everyChangeStoresItsReview: a change of the tracked branch gets
// the review ConfigMap `kubectl sluice diff` reads before an approve,
// controlled by the ChangeRequest, with its manifest and digest.
func TestSync_everyChangeStoresItsReview(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	srv := gittest.StartHTTP(t, root, gitUser, gitPassword)
	basicAuthSecret(t, ns, "git", gitUser, gitPassword)
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", srv.RepoURL("infra"), func(r *sluicev1.Repository) {
		r.Spec.SecretRef = &sluicev1.LocalObjectReference{Name: "git"}
	})
	waitHandled(t, repo, requestReconcile(t, repo))
	cr := changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", fixture.Head("main"), 1)]
	require.NotEmpty(t, cr.Name)

	cm := &corev1.ConfigMap{}
	require.NoError(t, k8s.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: review.ConfigMapName(cr.Name)}, cm))
	s, owned, err := review.FromConfigMap(cm, &cr)
	require.NoError(t, err)
	require.True(t, owned, "controlled by its ChangeRequest")
	assert.True(t, s.HasManifest)
	assert.NotEmpty(t, s.Objects, "nothing applied yet: every object is new")
	assert.Equal(t, string(cr.Spec.ApprovalDigest), s.Approval.Digest)
}
