package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/runtime/reconcile"
)

// Rollback after a failed verification (the Release's side).
//
// A Release pass keeps three records in the Release status: lastVerified
// (the newest change that was applied and Verified: what a rollback
// returns to), the quarantine (every change whose verification failed,
// newest first, MaxQuarantine kept: the gate never auto-approves their
// approvalDigest or content again) and the last rollback decision. The
// decision is taken once per failed change, for the newest failed change
// only, and written to status first; only once that write is stored is
// the Release annotated with RollbackAnnotation(failed) = the verified
// change, which asks the syncer to build the rollback. A restart between
// the two writes finds the decision stored and writes the annotation; it
// never decides twice.

// reconcileRollback updates lastVerified and the quarantine from the
// release's changes and decides on the newest failed change (see
// decideRollback). It only changes the status in memory; the pass writes
// it, and then the annotation (requestRollback).
func (r *ReleaseReconciler) reconcileRollback(_ context.Context, s *releaseScope) reconcile.Result {
	recordVerified(s)
	recordQuarantine(s)
	r.decideRollback(s)
	return reconcile.Next()
}

// verificationEnd is when a change's verification ended (its phase's
// time when it recorded none).
func verificationEnd(cr *sluicev1.ChangeRequest) *metav1.Time {
	if v := cr.Status.Verification; v != nil && v.FinishedAt != nil {
		return v.FinishedAt
	}
	return finishedAt(cr)
}

// timeOf is t, or the zero time for nil.
func timeOf(t *metav1.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}

// recordVerified records the newest Verified change as lastVerified. An
// older one never replaces it, and a recorded change that was deleted
// stays until a newer one verifies.
func recordVerified(s *releaseScope) {
	var newest *sluicev1.ChangeRequest
	for i := range s.changes {
		cr := &s.changes[i]
		if isPreview(cr) || cr.Status.Phase != sluicev1.PhaseVerified {
			continue
		}
		if cr.Name == s.rel.Status.AppliedChange {
			newest = cr
			break
		}
		if newest == nil || timeOf(verificationEnd(cr)).After(timeOf(verificationEnd(newest))) {
			newest = cr
		}
	}
	if newest == nil {
		return
	}
	// The change the Release has applied last, once verified, is the
	// newest verified whatever the clock says: stored times have whole
	// seconds, and a rollback may verify in the second its target did.
	applied := s.rel.Status.AppliedChange != "" && newest.Name == s.rel.Status.AppliedChange
	lv := s.rel.Status.LastVerified
	if !applied && lv != nil && lv.ChangeRequest != newest.Name && !timeOf(verificationEnd(newest)).After(timeOf(lv.VerifiedAt)) {
		return
	}
	s.rel.Status.LastVerified = &sluicev1.VerifiedChange{
		ChangeRequest:  newest.Name,
		Revision:       newest.Spec.Revision,
		ApprovalDigest: newest.Spec.ApprovalDigest,
		ContentDigest:  newest.Spec.ContentDigest,
		VerifiedAt:     verificationEnd(newest),
	}
}

// recordQuarantine adds every change whose verification failed to the
// quarantine, newest first, keeping MaxQuarantine entries. Entries of
// deleted changes stay; the order depends only on the changes, so a pass
// with nothing new writes nothing.
func recordQuarantine(s *releaseScope) {
	q := slices.Clone(s.rel.Status.Quarantine)
	for i := range s.changes {
		cr := &s.changes[i]
		if isPreview(cr) || cr.Status.Phase != sluicev1.PhaseVerificationFailed {
			continue
		}
		if slices.ContainsFunc(q, func(e sluicev1.QuarantineEntry) bool { return e.ChangeRequest == cr.Name }) {
			continue
		}
		q = append(q, sluicev1.QuarantineEntry{ChangeRequest: cr.Name, ApprovalDigest: cr.Spec.ApprovalDigest, ContentDigest: cr.Spec.ContentDigest, At: verificationEnd(cr)})
	}
	slices.SortStableFunc(q, func(a, b sluicev1.QuarantineEntry) int {
		if c := timeOf(b.At).Compare(timeOf(a.At)); c != 0 {
			return c
		}
		return strings.Compare(b.ChangeRequest, a.ChangeRequest)
	})
	if len(q) > sluicev1.MaxQuarantine {
		q = q[:sluicev1.MaxQuarantine]
	}
	if len(q) == 0 {
		q = nil
	}
	s.rel.Status.Quarantine = q
}

// decideRollback decides, once, what happens after the newest change
// whose verification failed: no rollback of a rollback, none while a
// newer change of the release waits or was applied (it goes first, no
// flapping), none when nothing was ever verified; otherwise a rollback to
// lastVerified. Each decision is in status.rollback, the RolledBack
// condition and an Event (sent once the status is stored). An older
// failed change than the one last decided on is never decided on.
func (r *ReleaseReconciler) decideRollback(s *releaseScope) {
	var failed *sluicev1.ChangeRequest
	for i := range s.changes {
		if cr := &s.changes[i]; !isPreview(cr) && cr.Status.Phase == sluicev1.PhaseVerificationFailed {
			failed = cr
			break
		}
	}
	if failed == nil {
		return
	}
	last := s.rel.Status.Rollback
	if last != nil && (last.Of == failed.Name || (last.DecidedAt != nil && timeOf(verificationEnd(failed)).Before(last.DecidedAt.Time))) {
		return
	}
	why := "verification failed"
	if c := meta.FindStatusCondition(failed.Status.Conditions, sluicev1.ConditionVerified); c != nil && c.Message != "" {
		why = c.Reason + ": " + c.Message
	}
	now := metav1.NewTime(r.now())
	d := &sluicev1.RollbackDecision{Of: failed.Name, DecidedAt: &now}
	lv := s.rel.Status.LastVerified
	switch newer := newerChange(s, failed); {
	case failed.IsRollback():
		d.Reason = sluicev1.ReasonRollbackOfRollback
		d.Message = fmt.Sprintf("%s, itself a rollback of %s to %s, failed its verification (%s); it is not rolled back again: a person decides", failed.Name, failed.Spec.Rollback.Of, failed.Spec.Rollback.To, why)
	case newer != nil:
		d.Reason = sluicev1.ReasonNewerChange
		d.Message = fmt.Sprintf("%s failed its verification (%s), but the newer change %s of the release is %s; it goes first, no rollback", failed.Name, why, newer.Name, phaseOf(newer))
	case lv == nil:
		d.Reason = sluicev1.ReasonNothingVerified
		d.Message = fmt.Sprintf("%s failed its verification (%s), and nothing of release %s was ever verified: there is no change to return to", failed.Name, why, s.rel.Name)
	default:
		d.To, d.Requested, d.Reason = lv.ChangeRequest, true, sluicev1.ReasonRollbackRequested
		d.Message = fmt.Sprintf("%s failed its verification (%s); a rollback to the last verified change %s (revision %s) was asked of the syncer", failed.Name, why, lv.ChangeRequest, sluicev1.ShortSHA(lv.Revision))
	}
	d.Message = truncate(d.Message)
	s.rel.Status.Rollback = d
	status, typ := metav1.ConditionFalse, "Warning"
	if d.Requested {
		status, typ = metav1.ConditionTrue, "Normal"
	}
	s.summary.Set(sluicev1.ConditionRolledBack, status, d.Reason, d.Message)
	rel := s.rel
	s.afterWrite = append(s.afterWrite, func() {
		r.Recorder.Eventf(rel, nil, typ, d.Reason, "Rollback", "%s", d.Message)
	})
}

// newerChange returns a change of the release that waits (is not
// terminal) or that was applied after failed (the Release records
// another applied change: changes apply one at a time, so it came
// later); nil when there is none. Creation times have one-second
// resolution, so "newer" is never read from them.
func newerChange(s *releaseScope, failed *sluicev1.ChangeRequest) *sluicev1.ChangeRequest {
	for i := range s.all {
		cr := &s.all[i]
		if cr.Name != failed.Name && !isPreview(cr) && !cr.Status.Phase.IsTerminal() {
			return cr
		}
	}
	if applied := s.rel.Status.AppliedChange; applied != "" && applied != failed.Name {
		for i := range s.all {
			if s.all[i].Name == applied {
				return &s.all[i]
			}
		}
		return &sluicev1.ChangeRequest{ObjectMeta: metav1.ObjectMeta{Name: applied}, Status: sluicev1.ChangeRequestStatus{Phase: sluicev1.PhaseApplied}}
	}
	return nil
}

// requestRollback brings the Release's rollback annotations in line with
// its stored status: RollbackAnnotation(of) = to for a requested
// rollback, none for anything else (an earlier decision's request is
// taken back). It runs only after the status holding the decision was
// stored, so the syncer never sees a request the status does not hold.
// It writes nothing when the annotations already say so.
func (r *ReleaseReconciler) requestRollback(ctx context.Context, rel *sluicev1.Release) error {
	want := map[string]string{}
	if d := rel.Status.Rollback; d != nil && d.Requested && d.To != "" {
		want[sluicev1.RollbackAnnotation(d.Of)] = d.To
	}
	patch := map[string]any{}
	for k := range rel.Annotations {
		if _, ok := want[k]; !ok && strings.HasPrefix(k, sluicev1.AnnotationRollbackPrefix) {
			patch[k] = nil
		}
	}
	for k, v := range want {
		if rel.Annotations[k] != v {
			patch[k] = v
		}
	}
	if len(patch) == 0 {
		return nil
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": patch}})
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, rel, client.RawPatch(types.MergePatchType, data), client.FieldOwner(FieldOwner)); err != nil {
		return fmt.Errorf("annotate Release %s with its rollback request: %w", rel.Name, err)
	}
	return nil
}
