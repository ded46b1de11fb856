package controller

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Trigger asks for an immediate reconcile of one Repository, outside the
// poll interval: the webhook receiver calls Request on a verified push. It
// is a controller-runtime channel source, so requests for a Repository
// already queued are merged by the work queue.
type Trigger struct {
	events chan event.TypedGenericEvent[*sluicev1.Repository]
}

// NewTrigger returns a Trigger; pass it to RepositoryReconciler.Trigger
// before SetupWithManager.
func NewTrigger() *Trigger {
	return &Trigger{events: make(chan event.TypedGenericEvent[*sluicev1.Repository], 1024)}
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
