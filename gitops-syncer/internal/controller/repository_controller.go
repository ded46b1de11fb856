// Package controller holds the syncer's Repository reconciler: it polls
// each Repository's remote head, and for every new commit works out which
// releases (service × environment) changed, builds their artifacts, has them
// validated, and records Releases, ChangeRequests and plan Secrets; and it
// answers the operator's rollback requests (rollback.go).
package controller

import (
	"context"
	"maps"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/catalog"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/metrics"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/chartrepo"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// ControllerName is the field owner and event reporter of the syncer.
const ControllerName = "gitops-syncer"

// Event reasons of the syncer (condition reasons live in the API package).
const (
	// eventChangeRequestCreated: a ChangeRequest was recorded for a Release.
	eventChangeRequestCreated = "ChangeRequestCreated"
)

// RepositoryReconciler reconciles Repository objects.
type RepositoryReconciler struct {
	client.Client
	// APIReader reads without the cache (fresh Secrets, AlreadyExists
	// checks); defaults to Client.
	APIReader client.Reader
	Git       git.Client
	Validator validation.Validator
	Store     *artifact.Store
	// ArtifactBaseURL prefixes artifact URLs written into ChangeRequests.
	ArtifactBaseURL string
	Recorder        events.EventRecorder
	Metrics         *metrics.Metrics
	// ScratchDir holds temporary checkouts; defaults to the OS temp dir.
	ScratchDir string
	// Trigger lets other code (the webhook receiver) ask for an immediate
	// reconcile of one Repository.
	Trigger *Trigger
	// MaxConcurrentReconciles defaults to 4.
	MaxConcurrentReconciles int
	// SkipNameValidation allows several controllers of this name in one
	// process (tests run several syncers).
	SkipNameValidation bool
	// Forge is the git provider's API where one is configured (the
	// syncer's status provider): a rollback's revert pull request is
	// opened through it and its branch pushed with its token (revert.go).
	// Nil: no revert pull requests.
	Forge *provider.API
	// Hooks are test seams.
	Hooks Hooks
	// ChartOptions bound and time out requests to chart repositories
	// (credentials come from each Repository); Charts keeps fetched
	// charts by digest.
	ChartOptions chartrepo.Options
	// ChartDigestRecheck is how long the digest a range of an OCI
	// registry resolved to is taken again, without asking the registry,
	// while the range still picks the same version (zero: asked every
	// pass). A tag moved in the registry is noticed within it.
	ChartDigestRecheck time.Duration
	Charts             ChartCache

	memoMu sync.Mutex
	memo   map[types.NamespacedName]syncMemo
	// manifests remembers each Release's last rendered Helm manifest
	// (guarded by memoMu).
	manifests     map[types.NamespacedName]renderedManifest
	manifestBytes int
	// shardSettled is, per Repository, the shard key all its objects were
	// found in (guarded by memoMu): reconcileShard looks again only when
	// the key changes or after a restart.
	shardSettled map[types.NamespacedName]string
	// catalog keeps each Repository's last services, by skeleton digest.
	catalog catalog.Cache
}

// Hooks let tests stop a reconcile at a chosen point.
type Hooks struct {
	// AfterChangeRequestCreated runs right after a ChangeRequest is created
	// (or found), before its plan Secrets and the Release status are
	// written; an error aborts the pass there, as a crash would.
	AfterChangeRequestCreated func(cr *sluicev1.ChangeRequest) error
}

// syncMemo remembers, per Repository, the commit whose releases were all
// processed and the input hash of each release then, so an idle poll costs
// one ls-remote and no git or API work.
type syncMemo struct {
	commit string
	trees  map[string]string
	// remote says a release takes its chart from a chart repository: a
	// new version there is a change with no new commit, so no poll is idle.
	remote bool
}

// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=repositories,verbs=get;list;watch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=repositories/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=get;list;watch;create;patch;update
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases/status,verbs=get;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=changerequests,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=approvals,verbs=get;list;create;patch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: Repository changes (spec or
// annotations), Release re-plan and rollback annotations, and the Trigger
// channel.
func (r *RepositoryReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.APIReader == nil {
		r.APIReader = mgr.GetAPIReader()
	}
	if r.Trigger == nil {
		r.Trigger = NewTrigger()
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = 4
	}
	replanChanged := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		UpdateFunc: func(e event.UpdateEvent) bool {
			return e.ObjectOld.GetAnnotations()[sluicev1.AnnotationReplan] != e.ObjectNew.GetAnnotations()[sluicev1.AnnotationReplan] ||
				!maps.Equal(sluicev1.RollbackRequests(e.ObjectOld.GetAnnotations()), sluicev1.RollbackRequests(e.ObjectNew.GetAnnotations()))
		},
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("repository").
		For(&sluicev1.Repository{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&sluicev1.Release{}, handler.EnqueueRequestForOwner(mgr.GetScheme(), mgr.GetRESTMapper(), &sluicev1.Repository{}, handler.OnlyControllerOwner()),
			builder.WithPredicates(replanChanged)).
		WatchesRawSource(source.Channel(r.Trigger.events, &handler.TypedEnqueueRequestForObject[*sluicev1.Repository]{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles, SkipNameValidation: &r.SkipNameValidation}).
		Complete(r)
}

// Reconcile syncs one Repository: ls-remote, and only when something moved,
// fetch, detect changed releases and create their ChangeRequests. A
// deleted Repository takes its Releases along through their owner
// references; nothing is written on it.
func (r *RepositoryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	repo := &sluicev1.Repository{}
	if err := r.Get(ctx, req.NamespacedName, repo); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !repo.DeletionTimestamp.IsZero() {
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	return reconcile.Loop(ctx, repo, r.pass)
}

// pass runs the steps of one sync of repo in order, summarises what they
// concluded and writes the status once, only when it changed. The write
// carries no resourceVersion: the webhook receiver writes status.pushes
// meanwhile, and the steps acted outside the Repository (ChangeRequests,
// Releases), so the pass must not run again on a lost race.
func (r *RepositoryReconciler) pass(ctx context.Context, repo *sluicev1.Repository) reconcile.Result {
	s := &repoScope{repo: repo}
	patch := reconcile.NewHelper(r.Client, repo, ControllerName, reconcile.WithoutOptimisticLock())
	res := reconcile.RunSteps(ctx, s, []reconcile.Step[*repoScope]{
		{Name: "suspend", Run: r.reconcileSuspend},
		{Name: "shard", Run: r.reconcileShard},
		{Name: "sync", Run: r.reconcileSync},
		{Name: "rollbacks", Run: r.reconcileRollbacks},
		{Name: "poll", Run: r.reconcilePoll},
	})
	// Only a pass that ended without a failure processed the generation
	// (a stalled one did: it returns none).
	s.summarize(!res.Is(reconcile.KindFailure))
	_, err := patch.Patch(ctx, repo)
	if apierrors.IsNotFound(err) {
		err = nil // deleted meanwhile: nothing left to write on
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "Patching the Repository status failed")
	}
	return reconcile.Settle(ctx, r.APIReader, repo, res, err)
}

// reconcileSuspend ends the pass of a suspended Repository: no poll, no
// sync, until spec.suspend is cleared.
func (r *RepositoryReconciler) reconcileSuspend(_ context.Context, s *repoScope) reconcile.Result {
	if !s.repo.Spec.Suspend {
		return reconcile.Next()
	}
	s.conclude(suspended())
	return reconcile.Done()
}

// reconcilePoll ends a pass that ran its sync (or found nothing to do, or
// reported a git problem): a requested reconcile is handled, and the next
// poll comes after the interval.
func (r *RepositoryReconciler) reconcilePoll(_ context.Context, s *repoScope) reconcile.Result {
	if v := s.repo.Annotations[sluicev1.AnnotationReconcileRequestedAt]; v != "" {
		s.repo.Status.LastHandledReconcileAt = v
	}
	return reconcile.Requeue(interval(s.repo))
}

// interval is the poll interval of repo.
func interval(repo *sluicev1.Repository) time.Duration {
	return repo.GetInterval()
}

func (r *RepositoryReconciler) forget(key types.NamespacedName) {
	r.memoMu.Lock()
	defer r.memoMu.Unlock()
	delete(r.memo, key)
	delete(r.shardSettled, key)
	r.catalog.Forget(func(owner string) bool { return strings.HasPrefix(owner, key.Namespace+"/"+key.Name+"/") })
}

func (r *RepositoryReconciler) memoFor(key types.NamespacedName) (syncMemo, bool) {
	r.memoMu.Lock()
	defer r.memoMu.Unlock()
	m, ok := r.memo[key]
	return m, ok
}

func (r *RepositoryReconciler) remember(key types.NamespacedName, m syncMemo) {
	r.memoMu.Lock()
	defer r.memoMu.Unlock()
	if r.memo == nil {
		r.memo = map[types.NamespacedName]syncMemo{}
	}
	r.memo[key] = m
}
