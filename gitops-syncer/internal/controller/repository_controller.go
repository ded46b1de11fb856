// Package controller holds the syncer's Repository reconciler: it polls
// each Repository's remote head, and for every new commit works out which
// releases (service × environment) changed, builds their artifacts, has them
// validated, and records Releases, ChangeRequests and plan Secrets.
package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
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
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/metrics"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
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
	// Hooks are test seams.
	Hooks Hooks

	memoMu sync.Mutex
	memo   map[types.NamespacedName]syncMemo
	// manifests remembers each Release's last rendered Helm manifest
	// (guarded by memoMu).
	manifests     map[types.NamespacedName]renderedManifest
	manifestBytes int
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
}

// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=repositories,verbs=get;list;watch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=repositories/status,verbs=get;patch;update
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases,verbs=get;list;watch;create;patch;update
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=releases/status,verbs=get;patch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=changerequests,verbs=get;list;watch;create
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;create
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the reconciler: Repository changes (spec or
// annotations), Release re-plan annotations, and the Trigger channel.
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
			return e.ObjectOld.GetAnnotations()[sluicev1.AnnotationReplan] != e.ObjectNew.GetAnnotations()[sluicev1.AnnotationReplan]
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
// fetch, detect changed releases and create their ChangeRequests. It writes
// the Repository status once, at the end.
func (r *RepositoryReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	logger := log.FromContext(ctx)
	repo := &sluicev1.Repository{}
	if err := r.Get(ctx, req.NamespacedName, repo); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !repo.DeletionTimestamp.IsZero() {
		// Releases go with the Repository through their owner references.
		r.forget(req.NamespacedName)
		return ctrl.Result{}, nil
	}

	before := repo.DeepCopy()
	s := &repoScope{repo: repo}
	defer func() {
		// Only a pass that ended without an error processed the
		// generation (a stalled one did: it returns none).
		s.summarize(retErr == nil)
		if equality.Semantic.DeepEqual(before.Status, repo.Status) {
			return
		}
		if err := r.Status().Patch(ctx, repo, client.MergeFrom(before), client.FieldOwner(ControllerName)); err != nil && !apierrors.IsNotFound(err) {
			logger.Error(err, "Patching the Repository status failed")
			if retErr == nil {
				retErr = fmt.Errorf("patch status: %w", err)
			}
		}
	}()

	if repo.Spec.Suspend {
		s.conclude(suspended())
		return ctrl.Result{}, nil
	}
	res, err := r.reconcileSync(ctx, s)
	if v := repo.Annotations[sluicev1.AnnotationReconcileRequestedAt]; v != "" && err == nil {
		repo.Status.LastHandledReconcileAt = v
	}
	return res, err
}

// interval is the poll interval of repo.
func interval(repo *sluicev1.Repository) time.Duration {
	return repo.GetInterval()
}

func (r *RepositoryReconciler) forget(key types.NamespacedName) {
	r.memoMu.Lock()
	defer r.memoMu.Unlock()
	delete(r.memo, key)
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
