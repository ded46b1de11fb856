package webhook

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// PushFieldOwner is the field owner of status.pushes.
const PushFieldOwner = "gitops-syncer-webhook-pushes"

// MaxPushRecords is the most pushes a Repository's status keeps (the API's
// limit); the oldest go first.
const MaxPushRecords = 100

// recordPush appends a verified push's pusher to the Repository's
// status.pushes, so the change of the branch that brings the pushed commit
// records them in spec.pushers (the gate treats pushers as authors) even
// when the syncer restarts or a poll takes several pushes at once. It runs
// only after the signature check, so the identity is the provider's, not
// the body's claim. The write carries the resourceVersion it read and
// retries on a conflict, so concurrent deliveries never drop each other.
func (r *Receiver) recordPush(ctx context.Context, key types.NamespacedName, cached *sluicev1.Repository, push *provider.Push, at time.Time) error {
	if r.Writer == nil || push == nil || push.Deleted || push.Pusher == "" {
		return nil
	}
	rec := sluicev1.PushRecord{Commit: push.After, Pusher: sluicev1.Identity(push.Pusher), ReceivedAt: &metav1.Time{Time: at}}
	// The first attempt starts from the copy the receiver already holds
	// (cached, read for this delivery): the write carries its
	// resourceVersion, so a stale copy only costs a conflict, and then
	// the attempts go on from fresh reads, as before.
	if cached != nil && cached.ResourceVersion != "" {
		err := r.appendPush(ctx, cached.DeepCopy(), rec)
		if !apierrors.IsConflict(err) {
			return err
		}
	}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		repo := &sluicev1.Repository{}
		if err := r.SecretReader.Get(ctx, key, repo); err != nil {
			return err
		}
		return r.appendPush(ctx, repo, rec)
	})
}

// appendPush appends rec to repo's status.pushes (nothing for a
// redelivery) in a write that carries repo's resourceVersion.
func (r *Receiver) appendPush(ctx context.Context, repo *sluicev1.Repository, rec sluicev1.PushRecord) error {
	for _, p := range repo.Status.Pushes {
		if p.Commit == rec.Commit && p.Pusher == rec.Pusher {
			return nil // a redelivery
		}
	}
	orig := repo.DeepCopy()
	pushes := append(append([]sluicev1.PushRecord{}, repo.Status.Pushes...), rec)
	if n := len(pushes) - MaxPushRecords; n > 0 {
		pushes = pushes[n:]
	}
	repo.Status.Pushes = pushes
	if err := r.Writer.Status().Patch(ctx, repo, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(PushFieldOwner)); err != nil {
		return fmt.Errorf("record the pusher of %s: %w", sluicev1.ShortSHA(rec.Commit), err)
	}
	return nil
}
