package controller

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// The steps of a Repository pass are pure on the scope: each says what it
// concluded and returns a typed result; the pass writes once.
func TestRepositorySteps_eachEndsThePassAsItsResultSays(t *testing.T) {
	r := &RepositoryReconciler{}
	ctx := context.Background()
	newRepo := func(suspend bool, requested string) *sluicev1.Repository {
		repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "infra", Namespace: "ctl", Generation: 3}}
		repo.Spec.Suspend = suspend
		repo.Spec.Interval = &metav1.Duration{Duration: 7 * time.Minute}
		if requested != "" {
			repo.Annotations = map[string]string{sluicev1.AnnotationReconcileRequestedAt: requested}
		}
		return repo
	}

	t.Run("a suspended Repository ends the pass, concluded suspended", func(t *testing.T) {
		s := &repoScope{repo: newRepo(true, "")}
		res := r.reconcileSuspend(ctx, s)
		assert.True(t, res.Is(reconcile.KindDone), res.String())
		if assert.NotNil(t, s.ready) {
			assert.Equal(t, kindSuspended, s.ready.kind)
		}
	})
	t.Run("an active Repository goes on to its sync", func(t *testing.T) {
		s := &repoScope{repo: newRepo(false, "")}
		assert.True(t, r.reconcileSuspend(ctx, s).Is(reconcile.KindNext))
		assert.Nil(t, s.ready)
	})
	t.Run("the poll marks a requested reconcile handled and looks again after the interval", func(t *testing.T) {
		s := &repoScope{repo: newRepo(false, "2026-12-03T10:00:00Z")}
		res := r.reconcilePoll(ctx, s)
		assert.True(t, res.Is(reconcile.KindRequeue), res.String())
		assert.Equal(t, 7*time.Minute, res.After())
		assert.Equal(t, "2026-12-03T10:00:00Z", s.repo.Status.LastHandledReconcileAt)
	})
	t.Run("a git problem only a human can fix stalls, and the poll goes on", func(t *testing.T) {
		s := &repoScope{repo: newRepo(false, "")}
		res := gitFailure(s, &git.Error{Reason: git.ReasonSecret, Message: `secret "git" not found`})
		assert.True(t, res.Is(reconcile.KindNext), res.String())
		assert.Equal(t, kindStalled, s.ready.kind)
		assert.Equal(t, sluicev1.ReasonSecretNotFound, s.ready.reason)
	})
	t.Run("a failure that is not git's is retried with backoff", func(t *testing.T) {
		s := &repoScope{repo: newRepo(false, "")}
		res := gitFailure(s, errors.New("read secret: connection refused"))
		assert.True(t, res.Is(reconcile.KindFailure), res.String())
		assert.Equal(t, kindRetrying, s.ready.kind)
	})
}
