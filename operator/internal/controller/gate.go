package controller

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kerrors "k8s.io/apimachinery/pkg/util/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/sluice-gitops/sluice/kit/tracing"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// The approval gate of a ChangeRequest, on cached data. The re-check on
// data read from the API server happens at the hand-off (lock.go).

// reconcileGate evaluates the gate on cached data: Rejected, waiting, or
// Approved (then the hand-off follows).
func (r *ChangeRequestReconciler) reconcileGate(ctx context.Context, s *changeScope) reconcile.Result {
	in, err := gateinput.Load(ctx, r.gateReader(), s.cr, s.release)
	if err != nil {
		return reconcile.Failure(err)
	}
	var approvals sluicev1.ApprovalList
	if err := r.Client.List(ctx, &approvals, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexApprovalDigest: string(s.cr.Spec.ApprovalDigest)}); err != nil {
		return reconcile.Failure(fmt.Errorf("list Approvals: %w", err))
	}
	d := r.decide(s, in, approvals.Items)
	if !d.Passed {
		s.setCondition(sluicev1.ConditionApproved, metav1.ConditionFalse, d.Reason, d.Message)
		s.setPhase(d.Phase(), d.Reason, d.Message)
		s.cr.Status.ApprovedAt = nil
		// A change that is not approved must not keep the lock.
		s.handBackIfHeld(s.release)
		return reconcile.Done()
	}
	s.setCondition(sluicev1.ConditionApproved, metav1.ConditionTrue, d.Reason, d.Message)
	if s.cr.Status.Phase != sluicev1.PhaseApproved {
		now := metav1.NewTime(r.now())
		s.cr.Status.ApprovedAt = &now
		wait := now.Sub(s.cr.CreationTimestamp.Time)
		_, span := tracer.Start(tracing.Extract(ctx, s.cr.Annotations[tracing.Annotation]), "sluice.approved", trace.WithAttributes(
			attribute.String("sluice.changerequest", s.cr.Namespace+"/"+s.cr.Name), attribute.String("sluice.gate.reason", d.Reason),
			attribute.StringSlice("sluice.gate.approvers", identities(d.ApprovedBy))))
		span.End()
		s.written = append(s.written, func() { r.Metrics.ApprovalWait(wait) })
	}
	s.setPhase(sluicev1.PhaseApproved, d.Reason, d.Message)
	return reconcile.Next()
}

// decide evaluates the gate on its inputs (see gateinput.Load) and records
// the effective rule and the counted approvers in status.
func (r *ChangeRequestReconciler) decide(s *changeScope, in gate.Inputs, approvals []sluicev1.Approval) gate.Decision {
	d, errs := gate.Decide(in, s.cr, approvals)
	api := d.Rule.API()
	s.cr.Status.EffectiveRule = &api
	s.cr.Status.Approvals = int32(len(d.ApprovedBy))
	s.cr.Status.ApprovedBy = d.ApprovedBy
	s.cr.Status.RejectedBy = d.RejectedBy
	validated := metav1.ConditionTrue
	vReason, vMessage := sluicev1.ReasonPolicyPassed, fmt.Sprintf("verdict %s, risk %s", s.cr.Spec.Verdict.Result, s.cr.Spec.Verdict.Risk)
	if d.Reason == sluicev1.ReasonPolicyDenied || d.Reason == sluicev1.ReasonDigestMismatch {
		validated, vReason, vMessage = metav1.ConditionFalse, d.Reason, d.Message
	}
	if len(errs) > 0 {
		vMessage += "; " + kerrors.NewAggregate(errs).Error()
	}
	s.setCondition(sluicev1.ConditionValidated, validated, vReason, vMessage)
	return d
}

// gateReader is what the gate reads its inputs through: the cache, except
// for the Releases of the control namespace. Those are read only for a
// change new to its target namespace (gate.NewToNamespace: every rule
// there counts), and they must all count, whichever shard serves them,
// while the cache of a sharded operator holds its own shard's only; the
// hand-off reads them from the API server too, and the two must agree.
func (r *ChangeRequestReconciler) gateReader() client.Reader {
	if r.APIReader == nil {
		return r.Client
	}
	return releasesFromAPI{Reader: r.Client, api: r.APIReader}
}

// releasesFromAPI lists Releases from the API server and reads everything
// else from the wrapped reader.
type releasesFromAPI struct {
	client.Reader
	api client.Reader
}

// List implements client.Reader.
func (r releasesFromAPI) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if _, ok := list.(*sluicev1.ReleaseList); ok && r.api != nil {
		return r.api.List(ctx, list, opts...)
	}
	return r.Reader.List(ctx, list, opts...)
}
