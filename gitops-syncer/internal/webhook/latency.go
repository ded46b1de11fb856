package webhook

import (
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Latency measures push-to-ChangeRequest latency: the receiver reports each
// verified push, and the first ChangeRequest (not a preview) of that
// Repository at the pushed commit, seen through the manager's informer,
// closes the measurement.
type Latency struct {
	Cache   cache.Cache
	Metrics *Metrics
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// OnObserve, if set, gets every measured latency (benchmarks).
	OnObserve func(d time.Duration)

	mu      sync.Mutex
	pending map[pushKey]time.Time
}

type pushKey struct {
	repo   types.NamespacedName
	commit string
}

// maxPending bounds the pushes waiting for a ChangeRequest (a push that
// changes no release never gets one); the oldest are dropped past it.
const (
	maxPending = 4096
	pendingTTL = 30 * time.Minute
)

// Pushed implements PushObserver.
func (l *Latency) Pushed(repo types.NamespacedName, commit string, at time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.pending == nil {
		l.pending = map[pushKey]time.Time{}
	}
	k := pushKey{repo: repo, commit: commit}
	if _, ok := l.pending[k]; ok {
		return
	}
	if len(l.pending) >= maxPending {
		l.expire(at)
	}
	if len(l.pending) < maxPending {
		l.pending[k] = at
	}
}

// expire drops measurements older than pendingTTL; called with mu held.
func (l *Latency) expire(now time.Time) {
	for k, t := range l.pending {
		if now.Sub(t) > pendingTTL {
			delete(l.pending, k)
		}
	}
}

// Start registers the ChangeRequest informer handler (a Runnable).
func (l *Latency) Start(ctx context.Context) error {
	if l.Now == nil {
		l.Now = time.Now
	}
	inf, err := l.Cache.GetInformer(ctx, &sluicev1.ChangeRequest{})
	if err != nil {
		return fmt.Errorf("change request informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: l.added}); err != nil {
		return fmt.Errorf("watch change requests: %w", err)
	}
	<-ctx.Done()
	return nil
}

// NeedLeaderElection: measurements come from the leader's receiver.
func (l *Latency) NeedLeaderElection() bool { return true }

func (l *Latency) added(obj any) {
	cr, ok := obj.(*sluicev1.ChangeRequest)
	if !ok || cr.Spec.PullRequest != nil {
		return
	}
	repo := cr.Labels[sluicev1.LabelRepository]
	if repo == "" {
		return
	}
	k := pushKey{repo: types.NamespacedName{Namespace: cr.Namespace, Name: repo}, commit: cr.Spec.Revision}
	l.mu.Lock()
	at, ok := l.pending[k]
	if ok {
		delete(l.pending, k)
	}
	l.mu.Unlock()
	if !ok {
		return
	}
	d := l.Now().Sub(at)
	if l.Metrics != nil {
		l.Metrics.PushToChangeRequest.Observe(d.Seconds())
	}
	if l.OnObserve != nil {
		l.OnObserve(d)
	}
}
