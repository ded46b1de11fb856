// Package applier is the interface between the approval gate and the
// appliers (Helm, Argo CD, Terraform, and the test applier).
package applier

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"time"

	"k8s.io/apimachinery/pkg/types"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Request is one approved change to apply. The gate has re-checked it right
// before the hand-off; the applier still verifies the content itself.
type Request struct {
	// Change is the approved ChangeRequest (phase Applying). It alone says
	// what is applied, where and how (SourceOf, NamespaceOf, DeliveryOf).
	Change *sluicev1.ChangeRequest
	// Release names the change's Release and carries its status (what was
	// applied), never its spec: any push rewrites the spec before anything
	// is approved, so an applier that read it would act on what nobody
	// approved.
	Release *ReleaseRef
	// Repository owns the Release; its serviceAccountName and
	// targetNamespaces bound what may be applied.
	Repository *sluicev1.Repository
}

// ReleaseRef is what an applier may know of a Release: who it is (the
// Helm release name, the owner of an Argo CD Application, the Terraform
// state's suffix) and what was applied, never its spec.
type ReleaseRef struct {
	Namespace string
	Name      string
	UID       types.UID
	// Status is the Release's status: the applied change, revision,
	// digest, rule and target namespace.
	Status sluicev1.ReleaseStatus
}

// ReleaseOf returns the ReleaseRef of rel (nil for nil): its name, UID and
// a copy of its status, none of its spec.
func ReleaseOf(rel *sluicev1.Release) *ReleaseRef {
	if rel == nil {
		return nil
	}
	return &ReleaseRef{Namespace: rel.Namespace, Name: rel.Name, UID: rel.UID, Status: *rel.Status.DeepCopy()}
}

// Removal is what a Cleaner removes: the workload of a Release as it was
// applied. An approved Delete change says where (spec.deletion); the
// finalizer of a Release deleted by hand takes the applied change's
// namespace, or the Release's status.appliedTargetNamespace.
type Removal struct {
	// Release is the Release whose workload is removed.
	Release *ReleaseRef
	// TargetNamespace is the namespace the workload was applied to; empty
	// when nothing was ever applied.
	TargetNamespace string
	// Change is the approved Delete change, nil for a finalizer's
	// cleanup. With a change, a workload the applier may not remove is a
	// *Failure (the change fails and says so); without one it is left in
	// place and the Result says so.
	Change *sluicev1.ChangeRequest
}

// Result is what an applier reports on success.
type Result struct {
	// HelmRevision is the Helm release revision installed, if any.
	HelmRevision int32
	// Terraform is the Terraform state the apply left, if it applied a plan.
	Terraform *sluicev1.TerraformApplyResult
	// Message is a one-line summary for the ChangeRequest status.
	Message string
}

// Applier applies one approved change.
//
// Apply must be idempotent per ChangeRequest: after a restart in the middle
// of an apply the operator calls it again for the same change, and the
// applier must finish or confirm its earlier attempt, never apply twice.
type Applier interface {
	// Name is the applier's name, recorded in status and metrics.
	Name() string
	// Apply applies the change. A *Failure error fails the change for good;
	// a *Waiting error means the work is under way elsewhere (look again
	// later, nothing failed); a *Stalled error needs an administrator; any
	// other error is retried with backoff.
	Apply(ctx context.Context, req Request) (Result, error)
}

// Cleaner is implemented by appliers that must undo their work when a
// Release is deleted (uninstall the Helm release, prune the Application).
type Cleaner interface {
	// Cleanup removes what the applier installed for the Release in
	// r.TargetNamespace. It returns once nothing is left, with a Result
	// whose Message says what was removed where (or what was left in
	// place, and why); a *Waiting error while another system (Argo CD's
	// finalizer) is still removing it; a *Failure when an approved Delete
	// change cannot remove it.
	Cleanup(ctx context.Context, r Removal, repo *sluicev1.Repository) (Result, error)
}

// Failure is a permanent failure: the change ends Failed with Reason (a
// condition reason constant from the API package) and nothing is retried.
type Failure struct {
	Reason  string
	Message string
	Err     error
}

func (f *Failure) Error() string {
	if f.Err != nil {
		return fmt.Sprintf("%s: %s: %v", f.Reason, f.Message, f.Err)
	}
	return fmt.Sprintf("%s: %s", f.Reason, f.Message)
}

func (f *Failure) Unwrap() error { return f.Err }

// Permanent returns a *Failure with a formatted message.
func Permanent(reason, format string, args ...any) error {
	return &Failure{Reason: reason, Message: fmt.Sprintf(format, args...)}
}

// AsFailure reports whether err is (or wraps) a permanent *Failure.
func AsFailure(err error) (*Failure, bool) {
	var f *Failure
	if errors.As(err, &f) {
		return f, true
	}
	return nil, false
}

// DefaultRetryAfter is how soon a Waiting outcome without RetryAfter is
// looked at again.
const DefaultRetryAfter = 5 * time.Second

// Waiting is not a failure: the applier handed the work to another system
// (Argo CD syncing, Argo CD pruning) that has not finished yet. The change
// stays where it is, its status says what it waits for (Reason, a
// condition reason constant), and it is looked at again after RetryAfter,
// without an error, a failure metric or backoff.
type Waiting struct {
	Reason  string
	Message string
	// RetryAfter is how soon to look again; DefaultRetryAfter when zero.
	RetryAfter time.Duration
	// Err, if set, is what is waited for (errors.Is matches it).
	Err error
}

func (w *Waiting) Error() string { return w.Message }

func (w *Waiting) Unwrap() error { return w.Err }

// After is how soon to look again.
func (w *Waiting) After() time.Duration {
	if w.RetryAfter > 0 {
		return w.RetryAfter
	}
	return DefaultRetryAfter
}

// Wait returns a *Waiting with a formatted message.
func Wait(reason string, after time.Duration, format string, args ...any) error {
	return &Waiting{Reason: reason, Message: fmt.Sprintf(format, args...), RetryAfter: after}
}

// AsWaiting reports whether err is (or wraps) a *Waiting.
func AsWaiting(err error) (*Waiting, bool) {
	var w *Waiting
	if errors.As(err, &w) {
		return w, true
	}
	return nil, false
}

// Stalled is a problem that no retry fixes and only an administrator does
// (a missing binary, a misconfigured operator). The change is not failed
// (it was approved and nothing was applied); it is marked Stalled with
// Reason and Message and not retried until the operator restarts or the
// change is touched.
type Stalled struct {
	Reason  string
	Message string
	Err     error
}

func (s *Stalled) Error() string {
	if s.Err != nil {
		return fmt.Sprintf("%s: %v", s.Message, s.Err)
	}
	return s.Message
}

func (s *Stalled) Unwrap() error { return s.Err }

// AsStalled reports whether err is (or wraps) a *Stalled, or a program the
// applier runs that is not installed (an *exec.Error from looking it up):
// then the message names the path that was looked for.
func AsStalled(err error) (*Stalled, bool) {
	var s *Stalled
	if errors.As(err, &s) {
		return s, true
	}
	var e *exec.Error
	if errors.As(err, &e) {
		return &Stalled{
			Reason:  sluicev1.ReasonBinaryNotFound,
			Message: fmt.Sprintf("the program %q was not found or cannot be run (%v); install it or point the operator's flag at it, then restart the operator", e.Name, e.Err),
			Err:     err,
		}, true
	}
	return nil, false
}

// Registry maps a delivery mode to its applier.
type Registry map[sluicev1.Delivery]Applier

// For returns the applier for a delivery mode.
func (r Registry) For(d sluicev1.Delivery) (Applier, bool) {
	a, ok := r[d]
	return a, ok
}

// SourceOf is the source the change acts on (see
// sluicev1.ChangeRequest.SourceOf), or a permanent InvalidSpec failure when
// the change records none: it was made by a syncer that did not record
// one, and nothing else may say what to apply (the Release's spec is what
// the latest push wrote, not what was approved).
func SourceOf(cr *sluicev1.ChangeRequest) (*sluicev1.ChangeSource, error) {
	if cr == nil {
		return nil, Permanent(sluicev1.ReasonInvalidSpec, "the request has no change")
	}
	s := cr.SourceOf()
	if s == nil {
		return nil, Permanent(sluicev1.ReasonInvalidSpec,
			"the change %s records no source (spec.source: service folder, chart, values, Terraform stack), so nothing says what to apply; re-plan it (annotate the Release %s) and approve the new change",
			cr.Name, sluicev1.AnnotationReplan)
	}
	return s, nil
}
