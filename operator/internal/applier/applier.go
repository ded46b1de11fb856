// Package applier is the interface between the approval gate and the
// appliers (Helm, Argo CD, Terraform, and the test applier).
package applier

import (
	"context"
	"errors"
	"fmt"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Request is one approved change to apply. The gate has re-checked it right
// before the hand-off; the applier still verifies the content itself.
type Request struct {
	// Change is the approved ChangeRequest (phase Applying).
	Change *sluicev1.ChangeRequest
	// Release is the change's Release.
	Release *sluicev1.Release
	// Repository owns the Release; its serviceAccountName and
	// targetNamespaces bound what may be applied.
	Repository *sluicev1.Repository
}

// Result is what an applier reports on success.
type Result struct {
	// HelmRevision is the Helm release revision installed, if any.
	HelmRevision int32
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
	// any other error is retried with backoff.
	Apply(ctx context.Context, req Request) (Result, error)
}

// Cleaner is implemented by appliers that must undo their work when a
// Release is deleted (uninstall the Helm release, prune the Application).
type Cleaner interface {
	// Cleanup removes what the applier installed for the Release. It returns
	// nil once nothing is left.
	Cleanup(ctx context.Context, release *sluicev1.Release, repo *sluicev1.Repository) error
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

// Registry maps a delivery mode to its applier.
type Registry map[sluicev1.Delivery]Applier

// For returns the applier for a delivery mode.
func (r Registry) For(d sluicev1.Delivery) (Applier, bool) {
	a, ok := r[d]
	return a, ok
}
