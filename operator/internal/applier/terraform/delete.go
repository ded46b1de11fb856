package terraform

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

var _ applier.Destroyer = (*chain)(nil)

// ApplyDestroyPlan implements applier.Destroyer: the Terraform applier's
// Apply of the Delete change's approved destroy plan file.
func (c *chain) ApplyDestroyPlan(ctx context.Context, req applier.Request) (applier.Result, error) {
	res, err := c.tf.Apply(ctx, req)
	if _, permanent := applier.AsFailure(err); err == nil || permanent {
		c.tf.Forget(req.Change)
	}
	return res, err
}

// DeleteState implements applier.Destroyer.
func (c *chain) DeleteState(ctx context.Context, req applier.Request) error {
	return c.tf.DeleteState(ctx, req)
}

// DeleteState deletes the Secret holding the release's Terraform state
// (Terraform's kubernetes backend: "tfstate-<workspace>-<release>") and its
// lock Lease, as the Repository's ServiceAccount, so the operator needs no
// rights on Secrets of its own. Gone already is no error.
func (a *Applier) DeleteState(ctx context.Context, req applier.Request) error {
	cr, rel, repo := req.Change, req.Release, req.Repository
	if cr == nil || rel == nil || repo == nil {
		return applier.Permanent(sluicev1.ReasonInvalidSpec, "the request has no change, release or repository")
	}
	// The state of the workspace the destroy plan was made for.
	stack, err := stackOf(cr)
	if err != nil {
		return err
	}
	sa := repo.Spec.ServiceAccountName
	if sa == "" {
		return applier.Permanent(sluicev1.ReasonInvalidSpec, "Repository %s names no serviceAccountName to act as", repo.Name)
	}
	ws := "default"
	if stack.Workspace != "" {
		ws = stack.Workspace
	}
	token, err := a.token(ctx, repo.Namespace, sa)
	if err != nil {
		return err
	}
	asSA := rest.AnonymousClientConfig(a.opts.Config)
	asSA.BearerToken = token
	cs, err := kubernetes.NewForConfig(asSA)
	if err != nil {
		return err
	}
	secret := StateSecretName(ws, rel.Name)
	if err := cs.CoreV1().Secrets(rel.Namespace).Delete(ctx, secret, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete the Terraform state Secret %s as %s:%s: %w", secret, repo.Namespace, sa, err)
	}
	lease := "lock-" + secret
	if err := cs.CoordinationV1().Leases(rel.Namespace).Delete(ctx, lease, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		return fmt.Errorf("delete the Terraform state lock %s: %w", lease, err)
	}
	a.opts.Log.V(1).Info("Deleted the Terraform state", "secret", rel.Namespace+"/"+secret)
	return nil
}

// StateSecretName is the Secret Terraform's kubernetes backend keeps a
// workspace's state in, with the release as secret_suffix.
func StateSecretName(workspace, release string) string {
	return "tfstate-" + workspace + "-" + release
}
