package tfstate

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The kubernetes backend's names (Terraform's
// internal/backend/remote-state/kubernetes): the Secret's data key and
// labels, its encoding annotation, and the Lease's lock-info annotation.
const (
	stateKey          = "tfstate"
	labelSuffix       = "tfstateSecretSuffix"
	labelWorkspace    = "tfstateWorkspace"
	labelManagedBy    = "app.kubernetes.io/managed-by"
	managedByTF       = "terraform"
	annotationEncode  = "encoding"
	encodingGzip      = "gzip"
	annotationLock    = "app.terraform.io/lock-info"
	annotationLockRun = "tfstate.sluice.dev/run"
)

// labels are the kubernetes backend's labels for st (its `labels` setting
// unused, as Sluice's backend override never set it).
func (st stateRef) labels() map[string]string {
	return map[string]string{
		stateKey:       "true",
		labelSuffix:    st.Release,
		labelWorkspace: st.Workspace,
		labelManagedBy: managedByTF,
	}
}

// checkOwner refuses an object that exists under st's name but is not st's
// state: another Secret of the control namespace, or the state of another
// workspace and release whose names join to the same object name
// ("a" + "b-c" and "a-b" + "c").
func (st stateRef) checkOwner(kind string, m metav1.ObjectMeta) error {
	l := m.Labels
	if l[stateKey] != "true" || l[labelSuffix] != st.Release || l[labelWorkspace] != st.Workspace {
		return refuse(http.StatusConflict, "%s %s/%s is not the state of workspace %q and release %q (its labels say otherwise)", kind, m.Namespace, m.Name, st.Workspace, st.Release)
	}
	return nil
}

// readState returns the uncompressed state (nil when there is none yet)
// and the Secret holding it (nil when it does not exist).
func (s *Server) readState(ctx context.Context, st stateRef) ([]byte, *corev1.Secret, error) {
	sec, err := s.cs.CoreV1().Secrets(st.Namespace).Get(ctx, st.secretName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("get Secret %s/%s: %w", st.Namespace, st.secretName(), err)
	}
	if err := st.checkOwner("Secret", sec.ObjectMeta); err != nil {
		return nil, nil, err
	}
	raw, ok := sec.Data[stateKey]
	if !ok || len(raw) == 0 {
		return nil, sec, nil
	}
	state, err := gunzip(raw, s.maxSize)
	if err != nil {
		return nil, nil, fmt.Errorf("Secret %s/%s: %w", st.Namespace, st.secretName(), err)
	}
	return state, sec, nil
}

// writeState stores body in st's Secret, creating it with the kubernetes
// backend's labels when missing. Every write is conditional on the
// resourceVersion read; on a conflict it reads again and checks again.
func (s *Server) writeState(ctx context.Context, st stateRef, body []byte, hdr stateHeader) error {
	compressed, err := gzipBytes(body)
	if err != nil {
		return err
	}
	secrets := s.cs.CoreV1().Secrets(st.Namespace)
	for range conflictRetries {
		old, sec, err := s.readState(ctx, st)
		if err != nil {
			return err
		}
		if old != nil {
			prev, err := parseStateHeader(old)
			if err != nil {
				return fmt.Errorf("the stored state of %s is unreadable: %w", st.secretName(), err)
			}
			if prev.Lineage != hdr.Lineage {
				return refuse(http.StatusConflict, "the new state has lineage %q; the stored state has %q", hdr.Lineage, prev.Lineage)
			}
			if *hdr.Serial < *prev.Serial {
				return refuse(http.StatusConflict, "the new state has serial %d, older than the stored serial %d", *hdr.Serial, *prev.Serial)
			}
		}
		if sec == nil {
			sec = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{
				Name: st.secretName(), Namespace: st.Namespace,
				Labels: st.labels(), Annotations: map[string]string{annotationEncode: encodingGzip},
			}, Data: map[string][]byte{stateKey: compressed}}
			_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
		} else {
			sec = sec.DeepCopy()
			if sec.Data == nil {
				sec.Data = map[string][]byte{}
			}
			sec.Data[stateKey] = compressed
			_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		}
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err):
			continue
		case apierrors.IsRequestEntityTooLargeError(err) || apierrors.IsInvalid(err):
			return refuse(http.StatusRequestEntityTooLarge, "the state (%d bytes, %d compressed) does not fit in a Secret: %v", len(body), len(compressed), err)
		default:
			return fmt.Errorf("write Secret %s/%s: %w", st.Namespace, st.secretName(), err)
		}
	}
	return refuse(http.StatusConflict, "the Secret %s kept changing while it was written; try again", st.secretName())
}

// checkHolder refuses a write unless the lock is held with id by this run.
// The lock ID alone is not enough: any holder of a credential for the state
// sees it in a 423.
func (s *Server) checkHolder(ctx context.Context, req request, id string) error {
	lease, err := s.cs.CoordinationV1().Leases(req.st.Namespace).Get(ctx, req.st.leaseName(), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return refuse(http.StatusConflict, "the state is not locked; writing it needs its lock")
	}
	if err != nil {
		return fmt.Errorf("get Lease %s/%s: %w", req.st.Namespace, req.st.leaseName(), err)
	}
	if err := req.st.checkOwner("Lease", lease.ObjectMeta); err != nil {
		return err
	}
	if holder(lease) != id || lease.Annotations[annotationLockRun] != req.c.Run {
		return refuse(http.StatusConflict, "the lock %q is not held by this run", id)
	}
	return nil
}

// takeLock takes st's Lease for info.ID and this run. A lock held by
// another is taken over only once it expired: a lock this server gave
// expires with the credential of the run that took it, which can then no
// longer write. Locks of the kubernetes backend never expire.
func (s *Server) takeLock(ctx context.Context, req request, info lockInfo) error {
	leases := s.cs.CoordinationV1().Leases(req.st.Namespace)
	infoJSON, err := json.Marshal(info)
	if err != nil {
		return err
	}
	acquired := metav1.NewMicroTime(req.now)
	duration := int32(max(1, time.Unix(req.c.Expires, 0).Sub(req.now).Round(time.Second)/time.Second))
	hold := func(l *coordinationv1.Lease) {
		if l.Annotations == nil {
			l.Annotations = map[string]string{}
		}
		l.Annotations[annotationLock] = string(infoJSON)
		l.Annotations[annotationLockRun] = req.c.Run
		l.Spec.HolderIdentity = &info.ID
		l.Spec.AcquireTime = &acquired
		l.Spec.LeaseDurationSeconds = &duration
	}
	for range conflictRetries {
		lease, err := leases.Get(ctx, req.st.leaseName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			lease = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: req.st.leaseName(), Namespace: req.st.Namespace, Labels: req.st.labels()}}
			hold(lease)
			_, err = leases.Create(ctx, lease, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue
			}
			if err != nil {
				return fmt.Errorf("create Lease %s/%s: %w", req.st.Namespace, req.st.leaseName(), err)
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("get Lease %s/%s: %w", req.st.Namespace, req.st.leaseName(), err)
		}
		if err := req.st.checkOwner("Lease", lease.ObjectMeta); err != nil {
			return err
		}
		if h := holder(lease); h != "" {
			if h == info.ID && lease.Annotations[annotationLockRun] == req.c.Run {
				return nil // Terraform's kubernetes backend also answers a repeated lock with success.
			}
			if !expired(lease, req.now) {
				return locked(lease)
			}
			s.log.Info("Taking over an expired state lock", "lease", req.st.leaseName(), "holder", h, "holderRun", lease.Annotations[annotationLockRun], "run", req.c.Run)
		}
		lease = lease.DeepCopy()
		hold(lease)
		_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("update Lease %s/%s: %w", req.st.Namespace, req.st.leaseName(), err)
		}
		return nil
	}
	return refuse(http.StatusConflict, "the Lease %s kept changing; try again", req.st.leaseName())
}

// releaseLock releases st's Lease when id and this run hold it, leaving
// the Lease as the kubernetes backend leaves an unlocked one.
func (s *Server) releaseLock(ctx context.Context, req request, id string) error {
	leases := s.cs.CoordinationV1().Leases(req.st.Namespace)
	for range conflictRetries {
		lease, err := leases.Get(ctx, req.st.leaseName(), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return refuse(http.StatusConflict, "the state is not locked")
		}
		if err != nil {
			return fmt.Errorf("get Lease %s/%s: %w", req.st.Namespace, req.st.leaseName(), err)
		}
		if err := req.st.checkOwner("Lease", lease.ObjectMeta); err != nil {
			return err
		}
		h := holder(lease)
		if h == "" {
			return refuse(http.StatusConflict, "the state is not locked")
		}
		if h != id || lease.Annotations[annotationLockRun] != req.c.Run {
			return locked(lease)
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
			return fmt.Errorf("update Lease %s/%s: %w", req.st.Namespace, req.st.leaseName(), err)
		}
		return nil
	}
	return refuse(http.StatusConflict, "the Lease %s kept changing; try again", req.st.leaseName())
}

func holder(l *coordinationv1.Lease) string {
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// expired says whether a lock this server gave has outlived the
// credential that took it.
func expired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Annotations[annotationLockRun] == "" || l.Spec.AcquireTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return false
	}
	return !now.Before(l.Spec.AcquireTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// locked is the 423 Terraform's http backend expects, with the holder's
// lock info.
func locked(l *coordinationv1.Lease) *httpError {
	body := []byte(l.Annotations[annotationLock])
	var info lockInfo
	if json.Unmarshal(body, &info) != nil || info.ID == "" {
		body, _ = json.Marshal(lockInfo{ID: holder(l)})
	}
	return &httpError{status: http.StatusLocked, msg: "the state is locked by " + holder(l), body: body}
}

func gzipBytes(data []byte) ([]byte, error) {
	var b bytes.Buffer
	gz := gzip.NewWriter(&b)
	if _, err := gz.Write(data); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// gunzip decompresses at most limit bytes; a larger state is refused, so a
// small Secret cannot expand into unbounded memory.
func gunzip(data []byte, limit int64) ([]byte, error) {
	gz, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("the state is not gzip: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(gz, limit+1))
	if err != nil {
		return nil, fmt.Errorf("the state is not gzip: %w", err)
	}
	if int64(len(out)) > limit {
		return nil, fmt.Errorf("the state is larger than %d bytes uncompressed", limit)
	}
	return out, nil
}
