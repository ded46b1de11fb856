package preview

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/provider"
	"github.com/sluice-gitops/sluice/kit/text"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// decisionOf maps a review state to an Approval decision; a commented
// review has none.
func decisionOf(s provider.ReviewState) (sluicev1.Decision, bool) {
	switch s {
	case provider.ReviewApproved:
		return sluicev1.DecisionApprove, true
	case provider.ReviewChangesRequested:
		return sluicev1.DecisionReject, true
	case provider.ReviewDismissed:
		return sluicev1.DecisionRevoke, true
	}
	return "", false
}

// ApprovalName is the deterministic name of the Approval a review makes for
// one release: a redelivered review creates nothing twice, and a dismissal
// of the same review is a separate object.
func ApprovalName(release string, pr, reviewID int64, d sluicev1.Decision) string {
	return fmt.Sprintf("%s-pr%d-review%d-%s", release, pr, reviewID, d)
}

// Review records a review as Approvals of the previews at the reviewed
// commit. A review counts only after the provider's API confirms it
// (Reviews): the reviewer may write to the repository now and the review is
// the reviewer's current state. It counts only for the commit it was given
// on: a review of an older head never approves the newer one.
func (h *Handler) Review(ctx context.Context, repo *sluicev1.Repository, ev *provider.Event) error {
	rev := ev.Review
	if rev == nil {
		return errors.New("no review in the event")
	}
	log := h.Log.WithValues("repository", repo.Namespace+"/"+repo.Name, "pullRequest", rev.PullRequest.Number, "review", rev.ID, "reviewer", rev.Reviewer)
	decision, ok := decisionOf(rev.State)
	if !ok {
		log.V(1).Info("Review without a decision", "state", rev.State)
		return nil
	}
	if rev.Access == provider.AccessNone {
		log.Info("Ignoring a review from a user the payload says cannot write")
		return nil
	}
	if h.Reviews == nil {
		log.Info("Cannot confirm the review: no provider API configured; ignoring it")
		return nil
	}
	confirmed, err := h.Reviews.Confirm(ctx, ev)
	if errors.Is(err, provider.ErrUnconfirmed) {
		log.Info("Ignoring a review the provider does not confirm", "reason", err.Error())
		return nil
	}
	if err != nil {
		return fmt.Errorf("confirm the review with the provider: %w", err)
	}
	rev = confirmed
	if d, ok := decisionOf(rev.State); !ok || d != decision {
		return nil
	}
	unlock := h.lock(repo, rev.PullRequest.Number)
	defer unlock()

	previews, err := h.previewsAt(ctx, repo, rev.PullRequest.Number, rev.CommitSHA)
	if err != nil {
		return err
	}
	if len(previews) == 0 && decision != sluicev1.DecisionRevoke && rev.CommitSHA == rev.PullRequest.HeadSHA {
		// The review may have overtaken the pull request event: build the
		// previews of the reviewed head now (idempotent).
		b, err := h.build(ctx, repo, ev, &rev.PullRequest, rev.CommitSHA)
		if err != nil {
			return err
		}
		for _, x := range b {
			previews = append(previews, x.cr)
		}
	}
	if len(previews) == 0 {
		log.Info("No preview at the reviewed commit; nothing to approve", "commit", sluicev1.ShortSHA(rev.CommitSHA))
		return nil
	}
	var errs []error
	for _, cr := range previews {
		a := &sluicev1.Approval{
			ObjectMeta: metav1.ObjectMeta{
				Name:      ApprovalName(cr.Spec.Release, rev.PullRequest.Number, rev.ID, decision),
				Namespace: repo.Namespace,
				Labels: map[string]string{
					sluicev1.LabelRepository:  repo.Name,
					sluicev1.LabelRelease:     cr.Spec.Release,
					sluicev1.LabelPullRequest: strconv.FormatInt(rev.PullRequest.Number, 10),
				},
			},
			Spec: sluicev1.ApprovalSpec{
				Release: cr.Spec.Release,
				// The review was given on this preview: it counts for it
				// and for the change of the tracked branch that merges the
				// pull request with the same content, never for a later
				// change that brings the content back.
				ChangeRequest:  cr.Name,
				ApprovalDigest: cr.Spec.ApprovalDigest,
				Decision:       decision,
				Approver:       sluicev1.Identity(rev.Reviewer),
				Source:         sluicev1.SourcePullRequest,
				Comment:        text.Truncate(rev.Body, 1000),
				PullRequest:    rev.PullRequest.Number,
				ReviewID:       rev.ID,
			},
		}
		sluicev1.SetShard(a, sluicev1.ShardOf(cr))
		if err := h.Client.Create(ctx, a, client.FieldOwner(FieldOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
			errs = append(errs, fmt.Errorf("create approval %s: %w", a.Name, err))
			continue
		}
		log.Info("Recorded a pull-request review", "approval", a.Name, "decision", decision, "approvalDigest", a.Spec.ApprovalDigest)
	}
	return errors.Join(errs...)
}

// previewsAt lists the previews of pull request n built at commit head.
func (h *Handler) previewsAt(ctx context.Context, repo *sluicev1.Repository, n int64, head string) ([]*sluicev1.ChangeRequest, error) {
	var list sluicev1.ChangeRequestList
	if err := h.reader().List(ctx, &list, client.InNamespace(repo.Namespace), client.MatchingLabels{
		sluicev1.LabelRepository: repo.Name, sluicev1.LabelPreview: "true", sluicev1.LabelPullRequest: strconv.FormatInt(n, 10),
	}); err != nil {
		return nil, fmt.Errorf("list previews: %w", err)
	}
	var out []*sluicev1.ChangeRequest
	for i := range list.Items {
		cr := &list.Items[i]
		if pr := cr.Spec.PullRequest; pr != nil && pr.Preview && pr.Number == n && pr.HeadSHA == head && cr.Spec.Revision == head {
			out = append(out, cr)
		}
	}
	return out, nil
}
