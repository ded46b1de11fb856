// Package controller holds the operator's reconcilers: the ChangeRequest
// reconciler, which holds every change at the approval gate and hands
// approved ones to an applier, and the Release reconciler, which summarises
// a release, keeps its history, prunes old ChangeRequests and orphaned
// Approvals, and cleans up on deletion.
package controller

import (
	"context"
	"fmt"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
	"github.com/sluice-gitops/sluice/operator/internal/eventrec"
	"github.com/sluice-gitops/sluice/operator/internal/metrics"
)

// Field indexes registered on the manager's cache.
const (
	// IndexApprovalDigest indexes ChangeRequests and Approvals by
	// spec.approvalDigest, so a new Approval finds its ChangeRequests.
	IndexApprovalDigest = "spec.approvalDigest"
	// IndexRelease indexes ChangeRequests and Approvals by spec.release.
	IndexRelease = "spec.release"
)

// FieldOwner is the field manager of every write the operator makes.
const FieldOwner = "sluice-operator"

// Options configure the reconcilers.
type Options struct {
	// Appliers maps a delivery mode to its applier.
	Appliers applier.Registry
	// Metrics records the sluice_* metrics; nil records nothing.
	Metrics *metrics.Recorder
	// Concurrency is the number of parallel reconciles per controller.
	Concurrency int
	// KeepChangeRequests is how many ChangeRequests per Release are kept
	// (older terminal ones are deleted); 20 when zero.
	KeepChangeRequests int
	// ApprovalGracePeriod is how long an Approval whose digest matches no
	// ChangeRequest is kept before it is deleted; 10 minutes when zero.
	ApprovalGracePeriod time.Duration
	// LockRetryInterval is how often the lock is looked at again in the
	// states no watch ends: a change in Applying whose lock a manual edit
	// gave to another live change, or a lock held by a change that is not
	// the release's own; 30 seconds when zero. Changes waiting in line do
	// not poll: the lock is handed to them.
	LockRetryInterval time.Duration
	// AppliedObjects, when set, gives verification's health the live
	// objects a Helm change installed (see ChangeRequestReconciler).
	AppliedObjects AppliedObjectsFunc
	// Shard is the shard key this operator serves (see sluicev1.LabelShard):
	// its cache holds only Releases, ChangeRequests, Approvals and
	// Repositories carrying it ("" serves those without the label), and its
	// uncached lists are selected by it too.
	Shard string
	// SkipNameValidation lets a process run the controllers more than once
	// (tests that restart the manager); the operator leaves it false.
	SkipNameValidation bool
}

// IndexFields registers the field indexes both reconcilers use.
func IndexFields(ctx context.Context, mgr ctrl.Manager) error {
	idx := mgr.GetFieldIndexer()
	for _, spec := range []struct {
		obj   client.Object
		field string
		fn    client.IndexerFunc
	}{
		{&sluicev1.ChangeRequest{}, IndexApprovalDigest, func(o client.Object) []string {
			return []string{string(o.(*sluicev1.ChangeRequest).Spec.ApprovalDigest)}
		}},
		{&sluicev1.ChangeRequest{}, IndexRelease, func(o client.Object) []string {
			return []string{o.(*sluicev1.ChangeRequest).Spec.Release}
		}},
		{&sluicev1.Approval{}, IndexApprovalDigest, func(o client.Object) []string {
			return []string{string(o.(*sluicev1.Approval).Spec.ApprovalDigest)}
		}},
		{&sluicev1.Approval{}, IndexRelease, func(o client.Object) []string {
			return []string{o.(*sluicev1.Approval).Spec.Release}
		}},
		{&sluicev1.Release{}, IndexReleaseTarget, releaseTargets},
		// The gate's reads by target namespace (gateinput), from a cache.
		{&sluicev1.Release{}, sluicev1.FieldTargetNamespace, func(o client.Object) []string {
			return []string{o.(*sluicev1.Release).Spec.TargetNamespace}
		}},
		{&sluicev1.Release{}, sluicev1.FieldAppliedTargetNamespace, func(o client.Object) []string {
			return []string{o.(*sluicev1.Release).Status.AppliedTargetNamespace}
		}},
	} {
		if err := idx.IndexField(ctx, spec.obj, spec.field, spec.fn); err != nil {
			return fmt.Errorf("index %T by %s: %w", spec.obj, spec.field, err)
		}
	}
	return nil
}

// Setup registers the indexes and both reconcilers with the manager.
func Setup(ctx context.Context, mgr ctrl.Manager, opts Options) error {
	if err := IndexFields(ctx, mgr); err != nil {
		return err
	}
	// Events go through the operator's own bounded recorder, not the
	// manager's, which holds each Event for minutes (see eventrec).
	events, err := eventrec.ForManager(mgr)
	if err != nil {
		return err
	}
	copts := controller.Options{MaxConcurrentReconciles: max(opts.Concurrency, 1)}
	if opts.SkipNameValidation {
		copts.SkipNameValidation = &opts.SkipNameValidation
	}
	cr := &ChangeRequestReconciler{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Recorder:          events.GetEventRecorder("sluice-changerequest"),
		Appliers:          opts.Appliers,
		Metrics:           opts.Metrics,
		LockRetryInterval: opts.LockRetryInterval,
		AppliedObjects:    opts.AppliedObjects,
		Shard:             opts.Shard,
	}
	if err := cr.SetupWithManager(mgr, copts); err != nil {
		return fmt.Errorf("set up the ChangeRequest controller: %w", err)
	}
	rel := &ReleaseReconciler{
		Client:              mgr.GetClient(),
		APIReader:           mgr.GetAPIReader(),
		Recorder:            events.GetEventRecorder("sluice-release"),
		Appliers:            opts.Appliers,
		KeepChangeRequests:  opts.KeepChangeRequests,
		ApprovalGracePeriod: opts.ApprovalGracePeriod,
		LockRetryInterval:   opts.LockRetryInterval,
		Shard:               opts.Shard,
	}
	if err := rel.SetupWithManager(mgr, copts); err != nil {
		return fmt.Errorf("set up the Release controller: %w", err)
	}
	return nil
}
