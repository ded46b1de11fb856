package helm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/helmcheck"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// explain turns a Helm error into what the gate records: a permanent
// *applier.Failure with a readable reason for what only a human can fix (a
// refused manifest, missing rights, a chart or object the API server
// rejects), or a wrapped error to retry for what may pass by itself (the
// network, a conflict, an overloaded API server, a concurrent operation).
func (s *session) explain(op string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, helmcheck.ErrManifestMismatch) {
		return &applier.Failure{Reason: sluicev1.ReasonManifestMismatch,
			Message: "Helm would install other manifests than were approved; nothing was installed", Err: unwrapMismatch(err)}
	}
	if errors.Is(err, helmcheck.ErrOutsideNamespace) {
		return &applier.Failure{Reason: sluicev1.ReasonOutsideNamespace,
			Message: fmt.Sprintf("Helm would put an object outside namespace %s that the Repository does not allow; nothing was installed: %s", s.namespace, outsideReason(err))}
	}
	if retryable(err) {
		return fmt.Errorf("helm %s in namespace %s: %w", op, s.namespace, err)
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		st := status.Status()
		switch {
		case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
			return &applier.Failure{Reason: sluicev1.ReasonApplyFailed,
				Message: fmt.Sprintf("helm %s: %s may not do this in namespace %s (give it a Role there): %s", op, s.user, s.namespace, st.Message)}
		case apierrors.IsNotFound(err) && st.Details != nil && st.Details.Kind == "namespaces":
			return &applier.Failure{Reason: sluicev1.ReasonApplyFailed,
				Message: fmt.Sprintf("helm %s: target namespace %s does not exist", op, s.namespace)}
		}
	}
	return &applier.Failure{Reason: sluicev1.ReasonApplyFailed, Message: fmt.Sprintf("helm %s in namespace %s", op, s.namespace), Err: err}
}

// retryable reports errors that may go away on their own.
func retryable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var ne net.Error
	if errors.As(err, &ne) {
		return true
	}
	if apierrors.IsConflict(err) || apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) ||
		apierrors.IsTimeout(err) || apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err) ||
		apierrors.IsUnexpectedServerError(err) {
		return true
	}
	msg := err.Error()
	// Helm's own "pending" lock and connection errors it flattens to text.
	for _, s := range []string{"another operation (install/upgrade/rollback) is in progress", "connection refused", "connection reset", "i/o timeout", "TLS handshake timeout"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// unwrapMismatch digs out the post-renderer's own error (which names both
// digests) from under Helm's wrapping.
func unwrapMismatch(err error) error {
	for e := err; e != nil; e = errors.Unwrap(e) {
		if next := errors.Unwrap(e); errors.Is(e, helmcheck.ErrManifestMismatch) && next == helmcheck.ErrManifestMismatch {
			return e
		}
	}
	return err
}

// outsideReason is the gate's own message (what, where, why) from under
// Helm's wrapping.
func outsideReason(err error) string {
	msg := err.Error()
	if i := strings.Index(msg, helmcheck.ErrOutsideNamespace.Error()+": "); i >= 0 {
		return msg[i+len(helmcheck.ErrOutsideNamespace.Error())+2:]
	}
	return msg
}
