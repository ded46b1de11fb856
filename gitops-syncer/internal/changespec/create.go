package changespec

import (
	"context"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Creator is the one path that stores a ChangeRequest built by Build, for
// the tracked branch, pull-request previews and deletions alike: owner
// reference, the trace annotation the operator continues, the create
// itself, and the created metric. What differs between the three (name,
// owner, findings) is in the Change and the arguments.
type Creator struct {
	Client client.Client
	// Reader reads a ChangeRequest that already exists (uncached); defaults
	// to Client.
	Reader     client.Reader
	FieldOwner string
	// Created counts created ChangeRequests by verdict result; nil counts
	// nothing.
	Created *prometheus.CounterVec
}

// Create stores cr, controlled by owner. Names are deterministic, so a
// ChangeRequest of the same name may exist already (a pass resumed after a
// crash, a concurrent webhook): it is then returned as found, with created
// false, for the caller to compare; nothing is overwritten.
func (c Creator) Create(ctx context.Context, owner client.Object, cr *sluicev1.ChangeRequest) (stored *sluicev1.ChangeRequest, created bool, err error) {
	if tp := tracing.Inject(ctx); tp != "" {
		// The operator continues this trace for the gate and the apply.
		if cr.Annotations == nil {
			cr.Annotations = map[string]string{}
		}
		cr.Annotations[tracing.Annotation] = tp
	}
	if err := controllerutil.SetControllerReference(owner, cr, c.Client.Scheme()); err != nil {
		return nil, false, fmt.Errorf("own change request %s: %w", cr.Name, err)
	}
	if err := c.Client.Create(ctx, cr, client.FieldOwner(c.FieldOwner)); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return nil, false, fmt.Errorf("create change request %s: %w", cr.Name, err)
		}
		reader := c.Reader
		if reader == nil {
			reader = c.Client
		}
		found := &sluicev1.ChangeRequest{}
		if err := reader.Get(ctx, client.ObjectKeyFromObject(cr), found); err != nil {
			return nil, false, fmt.Errorf("read change request %s: %w", cr.Name, err)
		}
		return found, false, nil
	}
	if c.Created != nil {
		c.Created.WithLabelValues(string(cr.Spec.Verdict.Result)).Inc()
	}
	return cr, true, nil
}
