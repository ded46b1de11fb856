package controller

import (
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Trigger asks for an immediate reconcile of one Repository, outside the
// poll interval: the webhook receiver calls Request on a verified push. It
// is a controller-runtime channel source, so requests for a Repository
// already queued are merged by the work queue.
type Trigger struct {
	events chan event.TypedGenericEvent[*sluicev1.Repository]
	mu     sync.Mutex
	// traces are the traceparents of the deliveries that asked, newest per
	// Repository, for the sync they cause to continue.
	traces map[types.NamespacedName]string
}

// NewTrigger returns a Trigger; pass it to RepositoryReconciler.Trigger
// before SetupWithManager.
func NewTrigger() *Trigger {
	return &Trigger{events: make(chan event.TypedGenericEvent[*sluicev1.Repository], 1024), traces: map[types.NamespacedName]string{}}
}

// Request queues namespace/name for an immediate reconcile. It never
// blocks: when the buffer is full it reports false and the poll interval
// stays the safety net.
func (t *Trigger) Request(namespace, name string) bool {
	ev := event.TypedGenericEvent[*sluicev1.Repository]{Object: &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}}
	select {
	case t.events <- ev:
		return true
	default:
		return false
	}
}

// RequestTraced is Request for a delivery whose trace (a W3C traceparent)
// the sync it causes continues.
func (t *Trigger) RequestTraced(namespace, name, traceparent string) bool {
	if traceparent != "" {
		t.mu.Lock()
		t.traces[types.NamespacedName{Namespace: namespace, Name: name}] = traceparent
		t.mu.Unlock()
	}
	return t.Request(namespace, name)
}

// Take returns and forgets the traceparent a delivery left for key.
func (t *Trigger) Take(key types.NamespacedName) string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tp := t.traces[key]
	delete(t.traces, key)
	return tp
}
