package changespec

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/review"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// ReviewInput is what the review of a change is rendered from beyond the
// ChangeRequest: the validator's plan, manifests and risk reasons, and
// the release's last applied revision the manifest is compared with.
func ReviewInput(res *validation.Result, appliedRevision string) review.Input {
	return review.Input{Plan: res.Plan, PlanSecrets: res.PlanSecrets, Manifest: res.Manifest, PreviousManifest: res.PreviousManifest,
		AppliedRevision: appliedRevision, RiskReasons: res.RiskReasons}
}

// StoreReview stores the redacted review section of cr (the plan and the
// manifest diff the pull request shows) in the ConfigMap review.ConfigMapName,
// controlled by cr and annotated with its approvalDigest, for `kubectl
// sluice diff`. One that exists already is left as it is: a ChangeRequest
// never changes. Admission lets only the syncer write it.
func StoreReview(ctx context.Context, c client.Client, fieldOwner string, cr *sluicev1.ChangeRequest, in review.Input) error {
	in.Change = cr
	s, err := review.Build(in)
	if err != nil {
		return err
	}
	cm, err := review.NewConfigMap(cr, s)
	if err != nil {
		return err
	}
	// diff shows the review only for the change whose digest it carries.
	if cm.Annotations == nil {
		cm.Annotations = map[string]string{}
	}
	cm.Annotations[review.AnnotationApprovalDigest] = string(cr.Spec.ApprovalDigest)
	if err := c.Create(ctx, cm, client.FieldOwner(fieldOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("store the review of %s: %w", cr.Name, err)
	}
	return nil
}
