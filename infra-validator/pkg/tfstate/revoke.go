package tfstate

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Revoke ends a credential before it expires, for a run known to be over
// (its runner died without a result): from now on the server refuses its
// token, and the state's lock is freed when that run holds it, so the next
// run does not wait for the token to expire. A lock of another run, or of
// the kubernetes backend, is left alone. A credential that already expired
// needs nothing: its lock may be taken over.
func (s *Server) Revoke(ctx context.Context, cred Credential) error {
	c, err := parseToken(s.key, cred.Password, s.now())
	if err != nil {
		if errors.Is(err, errBadToken) && cred.Password != "" {
			return nil // expired (or not one of this server's): it opens nothing
		}
		return err
	}
	return s.revoke(ctx, c)
}

// revoke ends the credential of c's run and frees the lock that run holds.
func (s *Server) revoke(ctx context.Context, c claims) error {
	s.revokedMu.Lock()
	if s.revoked == nil {
		s.revoked = map[string]int64{}
	}
	now := s.now().Unix()
	for run, exp := range s.revoked {
		if now >= exp {
			delete(s.revoked, run) // its token is refused as expired anyway
		}
	}
	s.revoked[c.Run] = c.Expires
	s.revokedMu.Unlock()

	st, err := newStateRef(c.Namespace, c.Workspace, c.Release)
	if err != nil {
		return err
	}
	leases := s.cs.CoordinationV1().Leases(st.Namespace)
	for range conflictRetries {
		lease, err := leases.Get(ctx, st.leaseName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("get Lease %s/%s: %w", st.Namespace, st.leaseName(), err)
		}
		if st.checkOwner("Lease", lease.ObjectMeta) != nil || holder(lease) == "" || lease.Annotations[annotationLockRun] != c.Run {
			return nil
		}
		lease = lease.DeepCopy()
		lease.Spec.HolderIdentity = nil
		lease.Spec.AcquireTime = nil
		lease.Spec.LeaseDurationSeconds = nil
		delete(lease.Annotations, annotationLock)
		delete(lease.Annotations, annotationLockRun)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("update Lease %s/%s: %w", st.Namespace, st.leaseName(), err)
		}
		s.log.Info("Freed the state lock of a run that ended", "lease", st.leaseName(), "run", c.Run)
		return nil
	}
	return fmt.Errorf("the Lease %s kept changing; the lock frees when the run's token expires", st.leaseName())
}

// isRevoked reports whether run's credential was revoked.
func (s *Server) isRevoked(run string, now time.Time) bool {
	s.revokedMu.Lock()
	defer s.revokedMu.Unlock()
	exp, ok := s.revoked[run]
	return ok && now.Unix() < exp
}
