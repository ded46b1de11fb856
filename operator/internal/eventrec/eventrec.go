// Package eventrec records the operator's Kubernetes Events
// (events.k8s.io/v1) with bounded memory.
//
// controller-runtime's recorder (client-go's events/v1 broadcaster) keeps a
// copy of every Event it sent for 6 to 12 minutes, to count repeats of the
// same reason on the same object as one series, and holds one goroutine
// with its Event per Event waiting for the API server. The operator's
// Events are phase changes, drift findings and clean-up results: a repeat
// within minutes is rare, so that cache is nearly all cost, and it grew the
// heap with every change processed (issue 28). Here an Event is built
// exactly as client-go builds it (same name, reasons, actions, notes,
// reporting controller and instance), put on a bounded queue and created by
// a few workers; nothing is kept once it is sent. When the queue is full
// (the API server has been unreachable for a while), new Events are
// dropped and counted in sluice_events_dropped_total, as client-go drops
// them when its queue is full.
package eventrec

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	eventsv1client "k8s.io/client-go/kubernetes/typed/events/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/record/util"
	"k8s.io/client-go/tools/reference"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const (
	// QueueSize bounds the Events waiting to be sent (client-go's own
	// bound).
	QueueSize = 1000
	// workers send Events side by side.
	workers = 2
	// tries is how often an Event is sent when the API server cannot be
	// reached, a second apart, before it is given up.
	tries = 3
	// maxNoteLength is the API's limit on an Event's note.
	maxNoteLength = 1024
)

// dropped counts Events given up: the queue was full, or the API server
// refused or could not be reached after tries attempts.
var dropped = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "sluice_events_dropped_total",
	Help: "Kubernetes Events the operator gave up on: its queue was full, or the API server refused or could not be reached.",
})

func init() { ctrlmetrics.Registry.MustRegister(dropped) }

// Sink creates Events; events/v1's typed client satisfies it.
type Sink interface {
	Create(ctx context.Context, ev *eventsv1.Event) error
}

// clientSink creates Events with the typed events/v1 client.
type clientSink struct {
	c eventsv1client.EventsV1Interface
}

func (s clientSink) Create(ctx context.Context, ev *eventsv1.Event) error {
	_, err := s.c.Events(ev.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	return err
}

// Provider hands out recorders that share one bounded queue; Start sends
// what they record.
type Provider struct {
	scheme *runtime.Scheme
	sink   Sink
	host   string
	queue  chan *eventsv1.Event
	log    logr.Logger
	retry  time.Duration
	now    func() time.Time
}

// New returns a Provider that creates Events through sink.
func New(scheme *runtime.Scheme, sink Sink, log logr.Logger) *Provider {
	host, _ := os.Hostname()
	return &Provider{
		scheme: scheme, sink: sink, host: host, log: log,
		queue: make(chan *eventsv1.Event, QueueSize), retry: time.Second, now: time.Now,
	}
}

// NewForConfig returns a Provider that creates Events with an events/v1
// client of cfg and httpClient (the manager's, so it shares its
// connections).
func NewForConfig(cfg *rest.Config, httpClient *http.Client, scheme *runtime.Scheme, log logr.Logger) (*Provider, error) {
	c, err := eventsv1client.NewForConfigAndClient(cfg, httpClient)
	if err != nil {
		return nil, fmt.Errorf("create the events client: %w", err)
	}
	return New(scheme, clientSink{c}, log), nil
}

// ForManager returns a Provider sending with the manager's configuration,
// added to the manager so it sends while the manager runs (on every
// replica: a replica that is not the leader records nothing).
func ForManager(mgr ctrl.Manager) (*Provider, error) {
	p, err := NewForConfig(mgr.GetConfig(), mgr.GetHTTPClient(), mgr.GetScheme(), mgr.GetLogger().WithName("events"))
	if err != nil {
		return nil, err
	}
	if err := mgr.Add(p); err != nil {
		return nil, fmt.Errorf("add the event recorder: %w", err)
	}
	return p, nil
}

// NeedLeaderElection is false: Events recorded before the lease is lost
// are still sent.
func (p *Provider) NeedLeaderElection() bool { return false }

// Start sends queued Events until ctx ends.
func (p *Provider) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-ctx.Done():
					return
				case ev := <-p.queue:
					p.send(ctx, ev)
				}
			}
		}()
	}
	wg.Wait()
	return nil
}

// send creates ev, trying again a second later while the API server cannot
// be reached; an Event the API server refuses is logged and dropped (it
// would be refused again).
func (p *Provider) send(ctx context.Context, ev *eventsv1.Event) {
	for try := 1; ; try++ {
		err := p.sink.Create(ctx, ev)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return
		}
		// An Event the API server refuses would be refused again;
		// overload and unreachable servers are worth another try.
		_, isStatus := err.(apierrors.APIStatus)
		refused := isStatus && !apierrors.IsTooManyRequests(err) && !apierrors.IsServerTimeout(err) &&
			!apierrors.IsTimeout(err) && !apierrors.IsServiceUnavailable(err) && !apierrors.IsInternalError(err)
		if ctx.Err() != nil {
			return // shutting down: nothing to report to
		}
		if refused || try >= tries {
			dropped.Inc()
			p.log.Error(err, "Event not recorded", "regarding", ev.Regarding.Kind+"/"+ev.Regarding.Namespace+"/"+ev.Regarding.Name, "reason", ev.Reason)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(p.retry):
		}
	}
}

// GetEventRecorder returns the recorder of controller name (the Events'
// reportingController), as the manager's GetEventRecorder does.
func (p *Provider) GetEventRecorder(name string) events.EventRecorder {
	return &recorder{p: p, controller: name, instance: name + "-" + p.host}
}

// recorder is one controller's events.EventRecorder.
type recorder struct {
	p                    *Provider
	controller, instance string
}

// Eventf queues an Event about regarding (and related, if not nil). It
// never blocks: with the queue full, the Event is dropped and counted.
func (r *recorder) Eventf(regarding, related runtime.Object, eventtype, reason, action, note string, args ...any) {
	ev, err := r.p.build(regarding, related, eventtype, reason, action, fmt.Sprintf(note, args...), r.controller, r.instance)
	if err != nil {
		r.p.log.Error(err, "Event not recorded", "reason", reason)
		return
	}
	select {
	case r.p.queue <- ev:
	default:
		dropped.Inc()
	}
}

// build makes the Event client-go's events/v1 recorder makes.
func (p *Provider) build(regarding, related runtime.Object, eventtype, reason, action, note, controller, instance string) (*eventsv1.Event, error) {
	if !util.ValidateEventType(eventtype) {
		return nil, fmt.Errorf("event type %q is neither %s nor %s", eventtype, corev1.EventTypeNormal, corev1.EventTypeWarning)
	}
	ref, err := reference.GetReference(p.scheme, regarding)
	if err != nil {
		return nil, fmt.Errorf("reference the object of an event: %w", err)
	}
	var rel *corev1.ObjectReference
	if related != nil {
		if rel, err = reference.GetReference(p.scheme, related); err != nil {
			rel = nil // as client-go: the Event goes without it
		}
	}
	if len(note) > maxNoteLength {
		cut := maxNoteLength
		for cut > 0 && !utf8.RuneStart(note[cut]) {
			cut--
		}
		note = note[:cut]
	}
	ns := ref.Namespace
	if ns == "" {
		ns = metav1.NamespaceDefault
	}
	now := p.now()
	return &eventsv1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: util.GenerateEventName(ref.Name, now.UnixNano()), Namespace: ns},
		EventTime:           metav1.MicroTime{Time: now},
		ReportingController: controller,
		ReportingInstance:   instance,
		Action:              action,
		Reason:              reason,
		Regarding:           *ref,
		Related:             rel,
		Note:                note,
		Type:                eventtype,
	}, nil
}

var _ events.EventRecorder = &recorder{}
