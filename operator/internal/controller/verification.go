package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/gate"
	"github.com/sluice-gitops/sluice/operator/internal/gate/gateinput"
	"github.com/sluice-gitops/sluice/operator/internal/verify"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// healthRetry is how often a verification looks again at objects that
// are not current yet.
const healthRetry = 5 * time.Second

// verifySteps are the steps of a change in Verifying: its Release (for
// the query templates), the change as the API server has it (a pass on a
// cache that has not seen the last measurement yet would measure again),
// then the verification itself.
func (r *ChangeRequestReconciler) verifySteps() []reconcile.Step[*changeScope] {
	return []reconcile.Step[*changeScope]{
		{Name: "release", Run: r.reconcileRelease},
		{Name: "current", Run: r.reconcileCurrentCopy},
		{Name: "verify", Run: r.reconcileVerify},
	}
}

// startVerification moves a change that was just applied on to
// Verifying when it carries a verification; the first check runs in the
// next pass, once Verifying is stored.
func (r *ChangeRequestReconciler) startVerification(s *changeScope) reconcile.Result {
	if s.cr.Spec.Verification == nil {
		return reconcile.Done()
	}
	s.cr.Status.Verification = &sluicev1.VerificationStatus{StartedAt: metav1.NewTime(r.now())}
	s.setCondition(sluicev1.ConditionVerified, metav1.ConditionUnknown, sluicev1.ReasonVerifying, "verification started")
	s.setPhase(sluicev1.PhaseVerifying, sluicev1.ReasonVerifying, "applied; verifying health and metric checks")
	return reconcile.Requeue(time.Millisecond)
}

// reconcileVerify runs one pass of the verification (see package
// verify): health until every workload is current, then the metric
// checks that are due, then the soak time. It requeues for the next due
// measurement; what it measured is in status, so a restart continues
// where it stood. An inconclusive result stops here until a person acts.
func (r *ChangeRequestReconciler) reconcileVerify(ctx context.Context, s *changeScope) reconcile.Result {
	spec, st := s.cr.Spec.Verification, s.cr.Status.Verification
	if st == nil {
		st = &sluicev1.VerificationStatus{StartedAt: metav1.NewTime(r.now())}
		s.cr.Status.Verification = st
	}
	if spec == nil {
		return r.verified(s, "no verification to run")
	}
	if c := meta.FindStatusCondition(s.cr.Status.Conditions, sluicev1.ConditionVerified); c != nil && c.Reason == sluicev1.ReasonInconclusive {
		return r.reconcileSettle(ctx, s)
	}
	now := r.now()
	if st.HealthyAt == nil {
		if res, done := r.verifyHealth(ctx, s, spec, st, now); done {
			return res
		}
	}
	applied := st.StartedAt.Time
	if a := s.cr.Status.Apply; a != nil && a.FinishedAt != nil {
		applied = a.FinishedAt.Time
	}
	data := sluicev1.QueryData{Release: s.cr.Spec.Release, Namespace: s.cr.Spec.TargetNamespace, Revision: s.cr.Spec.Revision, AppliedAt: applied.UTC().Format(time.RFC3339)}
	d := verify.Advance(ctx, r.measurer(), spec, st, data, now)
	st.Message = truncate(d.Message)
	switch d.Outcome {
	case verify.Passed:
		r.noteRestored(ctx, s)
		return r.verified(s, d.Message)
	case verify.Failed:
		return r.verificationFailed(s, d.Reason, d.Message)
	case verify.Inconclusive:
		s.setCondition(sluicev1.ConditionVerified, metav1.ConditionUnknown, d.Reason, d.Message)
		s.ready(d.Reason, d.Message)
		return reconcile.Done()
	}
	s.setCondition(sluicev1.ConditionVerified, metav1.ConditionUnknown, d.Reason, d.Message)
	s.ready(d.Reason, d.Message)
	return reconcile.Requeue(d.After)
}

// verifyHealth checks the release's workloads and pods; done means the
// pass ends with res (unhealthy, timed out, or not current yet).
func (r *ChangeRequestReconciler) verifyHealth(ctx context.Context, s *changeScope, spec *sluicev1.VerificationSpec, st *sluicev1.VerificationStatus, now time.Time) (reconcile.Result, bool) {
	h, err := r.health(ctx, s)
	if err != nil {
		return reconcile.Failure(err), true
	}
	switch h.State {
	case verify.Healthy:
		t := metav1.NewTime(now)
		st.HealthyAt = &t
		return reconcile.Next(), false
	case verify.Unhealthy:
		return r.verificationFailed(s, sluicev1.ReasonUnhealthy, h.Message), true
	}
	if now.Sub(st.StartedAt.Time) >= spec.HealthTimeoutOrDefault() {
		return r.verificationFailed(s, sluicev1.ReasonHealthTimeout, fmt.Sprintf("not current within %s: %s", spec.HealthTimeoutOrDefault(), h.Message)), true
	}
	msg := "waiting for health: " + h.Message
	st.Message = truncate(msg)
	s.setCondition(sluicev1.ConditionVerified, metav1.ConditionUnknown, sluicev1.ReasonVerifying, msg)
	s.ready(sluicev1.ReasonVerifying, msg)
	return reconcile.Requeue(healthRetry), true
}

// health judges the objects the change installed when it was applied
// with Helm and AppliedObjects is set (a Helm record it cannot read keeps
// the health waiting, saying why, until the health timeout), else the
// release's workloads by their instance label (Argo CD, or no reader).
func (r *ChangeRequestReconciler) health(ctx context.Context, s *changeScope) (verify.Health, error) {
	cr := s.cr
	if r.AppliedObjects == nil || s.release == nil || (cr.Spec.Delivery != "" && cr.Spec.Delivery != sluicev1.DeliveryHelm) || cr.Status.Apply == nil || cr.Status.Apply.HelmRevision == 0 {
		return verify.CheckHealth(ctx, r.APIReader, cr.Spec.TargetNamespace, cr.Spec.Release)
	}
	repo := &sluicev1.Repository{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: cr.Namespace, Name: s.release.Spec.Repository}, repo); err != nil {
		return verify.Health{State: verify.Progressing, Message: fmt.Sprintf("the Repository %s: %v", s.release.Spec.Repository, err)}, nil
	}
	live, missing, err := r.AppliedObjects(ctx, s.release, repo, cr)
	if err != nil {
		return verify.Health{State: verify.Progressing, Message: "reading the objects the change installed: " + err.Error()}, nil
	}
	return verify.CheckAppliedHealth(ctx, r.APIReader, cr.Spec.TargetNamespace, cr.Spec.Release, live, missing)
}

// verified ends the verification as passed.
func (r *ChangeRequestReconciler) verified(s *changeScope, msg string) reconcile.Result {
	t := metav1.NewTime(r.now())
	s.cr.Status.Verification.FinishedAt = &t
	s.setCondition(sluicev1.ConditionVerified, metav1.ConditionTrue, sluicev1.ReasonVerificationPassed, msg)
	s.setPhase(sluicev1.PhaseVerified, sluicev1.ReasonVerificationPassed, msg)
	return reconcile.Done()
}

// noteRestored records the time to restore when s's change, about to be
// verified, restores its release: the release's newest verification
// failure ended after its newest other verified change. It reads the
// release's changes from the cache; the metric is observed once the
// Verified status is written.
func (r *ChangeRequestReconciler) noteRestored(ctx context.Context, s *changeScope) {
	var list sluicev1.ChangeRequestList
	if err := r.Client.List(ctx, &list, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexRelease: s.cr.Spec.Release}); err != nil {
		log.FromContext(ctx).Error(err, "List the release's changes for the time to restore")
		return
	}
	var lastFailed, lastVerified time.Time
	for i := range list.Items {
		c := &list.Items[i]
		v := c.Status.Verification
		if c.Name == s.cr.Name || v == nil || v.FinishedAt == nil {
			continue
		}
		switch at := v.FinishedAt.Time; c.Status.Phase {
		case sluicev1.PhaseVerificationFailed:
			if at.After(lastFailed) {
				lastFailed = at
			}
		case sluicev1.PhaseVerified:
			if at.After(lastVerified) {
				lastVerified = at
			}
		}
	}
	if lastFailed.IsZero() || !lastFailed.After(lastVerified) {
		return
	}
	restore, cr := r.now().Sub(lastFailed), s.cr
	s.written = append(s.written, func() { r.Metrics.Restored(cr, restore) })
}

// verificationFailed ends the verification as failed.
func (r *ChangeRequestReconciler) verificationFailed(s *changeScope, reason, msg string) reconcile.Result {
	failed := s.cr
	s.written = append(s.written, func() { r.Metrics.VerificationFailed(failed) })
	t := metav1.NewTime(r.now())
	s.cr.Status.Verification.FinishedAt = &t
	s.cr.Status.Verification.Message = truncate(msg)
	s.setCondition(sluicev1.ConditionVerified, metav1.ConditionFalse, reason, msg)
	s.setPhase(sluicev1.PhaseVerificationFailed, reason, msg)
	return reconcile.Done()
}

// measurer is the Prometheus client of the verifications.
func (r *ChangeRequestReconciler) measurer() verify.Measurer {
	if r.Measurer != nil {
		return r.Measurer
	}
	return defaultMeasurer
}

var defaultMeasurer = &verify.Prometheus{}

// reconcileSettle ends an inconclusive verification when a person
// settled it: the newest Approval with decision verify-pass or
// verify-fail given on this change since the inconclusive measurement,
// from someone the effective rule allows (gate.MaySettle). The settle is
// recorded (who, which Approval, why) and the change ends Verified or
// VerificationFailed; settles that do not count are named in the
// message, and the change waits on.
func (r *ChangeRequestReconciler) reconcileSettle(ctx context.Context, s *changeScope) reconcile.Result {
	st := s.cr.Status.Verification
	var since time.Time
	for i := len(st.Measurements) - 1; i >= 0; i-- {
		if st.Measurements[i].Phase == sluicev1.MeasurementInconclusive {
			// Creation times are in seconds.
			since = st.Measurements[i].Time.Truncate(time.Second)
			break
		}
	}
	var approvals sluicev1.ApprovalList
	if err := r.Client.List(ctx, &approvals, client.InNamespace(s.cr.Namespace), client.MatchingFields{IndexApprovalDigest: string(s.cr.Spec.ApprovalDigest)}); err != nil {
		return reconcile.Failure(fmt.Errorf("list Approvals: %w", err))
	}
	var settles []*sluicev1.Approval
	for i := range approvals.Items {
		a := &approvals.Items[i]
		if a.Spec.Decision.Settles() && a.Spec.ChangeRequest == s.cr.Name && !a.CreationTimestamp.Time.Before(since) {
			settles = append(settles, a)
		}
	}
	if len(settles) == 0 {
		return reconcile.Done()
	}
	slices.SortFunc(settles, func(x, y *sluicev1.Approval) int {
		if gate.Newer(x, y) {
			return -1
		}
		return 1
	})
	in, err := gateinput.Load(ctx, r.gateReader(), s.cr, s.release)
	if err != nil {
		return reconcile.Failure(err)
	}
	rule, _ := gate.EffectiveRule(in, s.cr)
	var refused []string
	for _, a := range settles {
		ok, why := gate.MaySettle(s.cr, rule, in.People, a)
		if !ok {
			refused = append(refused, why)
			continue
		}
		st.Settled = &sluicev1.VerificationSettlement{Approval: a.Name, Approver: a.Spec.Approver, Decision: a.Spec.Decision,
			Reason: a.Spec.Comment, At: metav1.NewTime(r.now())}
		msg := fmt.Sprintf("inconclusive; settled by %s: %s", a.Spec.Approver, reasonOrNone(a.Spec.Comment))
		if a.Spec.Decision == sluicev1.DecisionVerifyPass {
			r.noteRestored(ctx, s)
			t := metav1.NewTime(r.now())
			st.FinishedAt = &t
			st.Message = truncate(msg)
			s.setCondition(sluicev1.ConditionVerified, metav1.ConditionTrue, sluicev1.ReasonSettledPass, msg)
			s.setPhase(sluicev1.PhaseVerified, sluicev1.ReasonSettledPass, msg)
			return reconcile.Done()
		}
		return r.verificationFailed(s, sluicev1.ReasonSettledFail, msg)
	}
	msg := truncate("inconclusive; a person decides (kubectl sluice verify settle); not counted: " + strings.Join(refused, "; "))
	st.Message = msg
	s.setCondition(sluicev1.ConditionVerified, metav1.ConditionUnknown, sluicev1.ReasonInconclusive, msg)
	return reconcile.Done()
}

// reasonOrNone is a settle's reason, or says none was given.
func reasonOrNone(s string) string {
	if s == "" {
		return "no reason given"
	}
	return s
}
