package changespec

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// A plan that failed with a diagnostic that may quote values terraform
// read (the release's state, a file of the runner) shows only "plan
// failed (details for approvers)" in its findings. The full text is kept
// in the Secret PlanErrorSecretName(change), controlled by the
// ChangeRequest and labelled like its plan Secrets (so admission lets only
// the syncer write it): a Secret, because the viewer role reads every
// ConfigMap of the control namespace, and pushers may hold it.
const (
	// PlanErrorKey holds the text in the Secret.
	PlanErrorKey = "details"
	// LabelPlanError marks those Secrets.
	LabelPlanError = "gitops.sluice.dev/plan-error"
)

// PlanErrorSecretName is the name of the Secret holding a change's plan
// error details.
func PlanErrorSecretName(change string) string { return change + "-plan-error" }

// StorePlanError stores res.PlanErrorDetails, when there are any, in the
// Secret PlanErrorSecretName(cr.Name), controlled by cr. One that exists
// already is left as it is: a ChangeRequest never changes.
func StorePlanError(ctx context.Context, c client.Client, fieldOwner string, cr *sluicev1.ChangeRequest, res *validation.Result) error {
	if res == nil || res.PlanErrorDetails == "" {
		return nil
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: PlanErrorSecretName(cr.Name), Namespace: cr.Namespace,
			Labels: map[string]string{
				sluicev1.LabelChangeRequest: cr.Name,
				sluicev1.LabelRelease:       cr.Spec.Release,
				LabelPlanError:              "true",
			},
		},
		Type:       corev1.SecretTypeOpaque,
		StringData: map[string]string{PlanErrorKey: res.PlanErrorDetails},
	}
	if err := controllerutil.SetControllerReference(cr, s, c.Scheme()); err != nil {
		return fmt.Errorf("own the plan error of %s: %w", cr.Name, err)
	}
	if err := c.Create(ctx, s, client.FieldOwner(fieldOwner)); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("store the plan error of %s: %w", cr.Name, err)
	}
	return nil
}
