package controller

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/equality"
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

// sameSource reports whether two recorded sources are the same; a change
// recorded without one (an older syncer) is never the same.
func sameSource(a, b *sluicev1.ChangeSource) bool {
	return a != nil && b != nil && equality.Semantic.DeepEqual(a, b)
}

// adoptSpec writes the Release's spec from a recorded change: its source,
// target namespace, delivery and rule. The Release's spec is a summary of
// the newest recorded change, written only after the ChangeRequest exists,
// so a push that cannot be planned changes nothing; no applier acts on it
// (they read the approved ChangeRequest). A change without a source (a
// manifest that does not parse) leaves the spec as it is.
func (r *RepositoryReconciler) adoptSpec(ctx context.Context, plan *changePlan, cr *sluicev1.ChangeRequest) error {
	src := cr.Spec.Source
	if src == nil || plan.spec == nil {
		return nil
	}
	rel := plan.release
	want := *plan.spec.DeepCopy()
	want.Service, want.Environment, want.SourcePath = src.Service, src.Environment, src.Path
	want.Chart, want.Values, want.Terraform = src.Chart, src.Values, src.Terraform.DeepCopy()
	want.TargetNamespace, want.Delivery, want.Rule = cr.Spec.TargetNamespace, cr.Spec.Delivery, *cr.Spec.Rule.DeepCopy()
	if equality.Semantic.DeepEqual(rel.Spec, want) {
		return nil
	}
	patched := rel.DeepCopy()
	patched.Spec = want
	if err := r.Patch(ctx, patched, client.MergeFrom(rel), client.FieldOwner(ControllerName)); err != nil {
		return fmt.Errorf("update release %s from %s: %w", rel.Name, cr.Name, err)
	}
	rel.Spec, rel.ResourceVersion = patched.Spec, patched.ResourceVersion
	return nil
}
