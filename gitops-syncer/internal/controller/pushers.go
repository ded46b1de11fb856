package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// pushersBetween are the provider identities that pushed a commit of
// revision's history since base ("" for the whole history), from the
// verified pushes the webhook receiver recorded in the Repository's status
// (status.pushes): a push counts when the head it left is revision or an
// ancestor of it, and not base or an ancestor of base. The records outlive
// a restart or a poll that took several pushes at once, so no pusher is
// lost between the push and the change. A head the cache does not hold (a
// rewritten history) is not in revision's history.
func pushersBetween(pushes []sluicev1.PushRecord, cache *git.Repo, revision, base string) []sluicev1.Identity {
	var out []sluicev1.Identity
	for _, p := range pushes {
		if p.Pusher == "" || !cache.HasCommit(p.Commit) {
			continue
		}
		if in, err := cache.IsAncestor(p.Commit, revision); err != nil || !in {
			continue
		}
		if base != "" && cache.HasCommit(base) {
			if before, err := cache.IsAncestor(p.Commit, base); err == nil && before {
				continue
			}
		}
		out = changespec.AddIdentity(out, p.Pusher)
	}
	return out
}

// freshPushes reads the Repository's status.pushes from the API server, not
// the cache: the receiver records a push right before it triggers the
// sync, and the cache may not have seen the record yet.
func (r *RepositoryReconciler) freshPushes(ctx context.Context, repo *sluicev1.Repository) ([]sluicev1.PushRecord, error) {
	cur := &sluicev1.Repository{}
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(repo), cur); err != nil {
		return nil, fmt.Errorf("read pushes of %s: %w", repo.Name, err)
	}
	return cur.Status.Pushes, nil
}
