package controller_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/syncer"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// switchableValidator fails every validation while fail is set, as a
// state backend that does not answer would.
type switchableValidator struct {
	validation.Validator
	fail atomic.Bool
}

func (v *switchableValidator) Validate(ctx context.Context, req validation.Request) (*validation.Result, error) {
	if v.fail.Load() {
		return nil, errors.New("the validation backend does not answer")
	}
	return v.Validator.Validate(ctx, req)
}

// A pass that ends in an error (a release is retried) says why in Ready
// but leaves observedGeneration at the last generation processed, so a
// user can tell a processed generation from a failed one; the next pass
// without error records it.
func TestRepository_aFailedPassDoesNotAdvanceObservedGeneration(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t)
	fixture := seedHelmRepo(t, t.TempDir(), "infra")
	v := &switchableValidator{Validator: validator}
	startSyncer(t, ns, "", func(s *syncer.Syncer) { s.Reconciler.Validator = v })
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	got := waitHandled(t, repo, requestReconcile(t, repo))
	require.Equal(t, got.Generation, got.Status.ObservedGeneration, "the first pass processed its generation")

	// A new generation, and a new commit whose validation fails.
	v.fail.Store(true)
	fixture.WriteFile("services/alpha/values.yaml", "image:\n  repository: ghcr.io/example/alpha\n  tag: \"1.0.1\"\nreplicaCount: 1\n")
	fixture.Commit("alpha 1.0.1", "alice@example.com")
	got.Spec.Interval = &metav1.Duration{Duration: 2 * time.Hour}
	require.NoError(t, k8s.Update(ctx, got))
	failed := got.Generation
	ready := waitReady(t, repo, metav1.ConditionFalse, sluicev1.ReasonGitOperationFailed)
	assert.Contains(t, ready.Message, "the validation backend does not answer")
	assert.Equal(t, failed, ready.ObservedGeneration, "Ready says which generation failed")
	cur := &sluicev1.Repository{}
	require.NoError(t, k8s.Get(ctx, client.ObjectKeyFromObject(repo), cur))
	assert.Equal(t, failed, cur.Generation)
	assert.Equal(t, failed-1, cur.Status.ObservedGeneration, "a failed pass does not advance observedGeneration")

	// Fixed: the next pass processes the generation.
	v.fail.Store(false)
	got = waitHandled(t, repo, requestReconcile(t, repo))
	assert.Equal(t, got.Generation, got.Status.ObservedGeneration)
	waitReady(t, repo, metav1.ConditionTrue, sluicev1.ReasonSucceeded)
}
