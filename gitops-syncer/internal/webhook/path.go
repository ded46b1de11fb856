package webhook

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// PathFieldOwner is the field owner of status.webhookPath.
const PathFieldOwner = "gitops-syncer-webhook"

// PathReconciler gives every Repository its webhook path: PathPrefix and
// the hex sha256 of the Repository's namespace/name and 32 random bytes, so
// paths cannot be guessed from the name. It writes only status.webhookPath,
// with a merge patch of that one field, and never changes a path once set.
type PathReconciler struct {
	client.Client
	// Rand is the source of the token; defaults to crypto/rand.
	Rand io.Reader
	// SkipNameValidation lets several managers run in one process (tests).
	SkipNameValidation bool
}

// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=repositories,verbs=get;list;watch
// +kubebuilder:rbac:groups=gitops.sluice.dev,resources=repositories/status,verbs=get;patch

// SetupWithManager watches Repositories that have no webhook path yet.
func (r *PathReconciler) SetupWithManager(mgr ctrl.Manager) error {
	noPath := func(o client.Object) bool {
		repo, ok := o.(*sluicev1.Repository)
		return ok && repo.Status.WebhookPath == ""
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("repository-webhook-path").
		For(&sluicev1.Repository{}, builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(e event.CreateEvent) bool { return noPath(e.Object) },
			UpdateFunc:  func(e event.UpdateEvent) bool { return noPath(e.ObjectNew) },
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(e event.GenericEvent) bool { return noPath(e.Object) },
		})).
		WithOptions(controller.Options{SkipNameValidation: &r.SkipNameValidation}).
		Complete(r)
}

// Reconcile sets status.webhookPath when it is empty.
func (r *PathReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	repo := &sluicev1.Repository{}
	if err := r.Get(ctx, req.NamespacedName, repo); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if repo.Status.WebhookPath != "" || !repo.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, nil
	}
	path, err := NewPath(r.Rand, req.NamespacedName)
	if err != nil {
		return ctrl.Result{}, err
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]string{"webhookPath": path}})
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.Status().Patch(ctx, repo, client.RawPatch(types.MergePatchType, patch), client.FieldOwner(PathFieldOwner)); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(fmt.Errorf("set webhook path: %w", err))
	}
	return ctrl.Result{}, nil
}

// NewPath derives a webhook path for key from a fresh random token.
func NewPath(random io.Reader, key types.NamespacedName) (string, error) {
	if random == nil {
		random = rand.Reader
	}
	token := make([]byte, 32)
	if _, err := io.ReadFull(random, token); err != nil {
		return "", fmt.Errorf("make webhook token: %w", err)
	}
	h := sha256.New()
	h.Write([]byte(key.String()))
	h.Write([]byte{0})
	h.Write(token)
	return PathPrefix + hex.EncodeToString(h.Sum(nil)), nil
}
