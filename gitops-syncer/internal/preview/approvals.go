package preview

import (
	"context"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// CommentRefresher keeps the pull-request comments current between
// pushes: when the operator records a new approval state on a preview
// ChangeRequest (an Approval arrived or was revoked, the effective rule or
// the phase changed), the comment of its pull request is rendered again
// (Handler.RefreshApprovals); when a change of the tracked branch that
// merged pull requests moves on in its verification, their comments show
// it (Handler.RefreshMerged).
type CommentRefresher struct {
	Client  client.Client
	Handler *Handler
	// SkipNameValidation lets tests run several managers in one process.
	SkipNameValidation bool
}

// SetupWithManager watches preview ChangeRequests whose approval state
// changes.
func (r *CommentRefresher) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("preview-comments").
		WithOptions(controller.Options{SkipNameValidation: ptr.To(r.SkipNameValidation)}).
		For(&sluicev1.ChangeRequest{}, builder.WithPredicates(predicate.Funcs{
			// A create is also the informer's first list (a start, a
			// re-list after a lost watch): a preview the operator has
			// already judged is rendered again, in case its approvals
			// changed while nobody watched (a no-op without a comment
			// thread, and nothing is posted when the text is the same).
			CreateFunc: func(e event.CreateEvent) bool {
				cr, ok := e.Object.(*sluicev1.ChangeRequest)
				return ok && isPreview(cr) && cr.Status.Phase != ""
			},
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
			UpdateFunc: func(e event.UpdateEvent) bool {
				o, okO := e.ObjectOld.(*sluicev1.ChangeRequest)
				n, okN := e.ObjectNew.(*sluicev1.ChangeRequest)
				if !okO || !okN {
					return false
				}
				if isPreview(n) {
					return approvalStateChanged(o, n)
				}
				return len(n.Spec.MergedPullRequests) > 0 && verificationChanged(o, n)
			},
		})).
		Complete(r)
}

// Reconcile renders the comment of the preview's pull request again.
func (r *CommentRefresher) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cr := &sluicev1.ChangeRequest{}
	if err := r.Client.Get(ctx, req.NamespacedName, cr); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if !isPreview(cr) {
		return ctrl.Result{}, r.Handler.RefreshMerged(ctx, cr)
	}
	return ctrl.Result{}, r.Handler.RefreshApprovals(ctx, cr)
}

func isPreview(cr *sluicev1.ChangeRequest) bool {
	return cr.Spec.PullRequest != nil && cr.Spec.PullRequest.Preview
}

// approvalStateChanged compares what the comment's approval section is
// rendered from.
func approvalStateChanged(o, n *sluicev1.ChangeRequest) bool {
	a, b := o.Status, n.Status
	return a.Phase != b.Phase || !equality.Semantic.DeepEqual(a.EffectiveRule, b.EffectiveRule) ||
		!equality.Semantic.DeepEqual(a.ApprovedBy, b.ApprovedBy) || !equality.Semantic.DeepEqual(a.RejectedBy, b.RejectedBy)
}

// verificationChanged compares what a merged pull request's comment shows
// of the branch change's verification: the phase, the message, the
// measurements and who settled it.
func verificationChanged(o, n *sluicev1.ChangeRequest) bool {
	if o.Status.Phase != n.Status.Phase {
		return true
	}
	a, b := o.Status.Verification, n.Status.Verification
	if a == nil || b == nil {
		return a != b
	}
	return a.Message != b.Message || len(a.Measurements) != len(b.Measurements) || a.MeasurementsDropped != b.MeasurementsDropped ||
		!equality.Semantic.DeepEqual(a.Settled, b.Settled)
}
