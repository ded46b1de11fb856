package eventrec

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// sink keeps what it was sent; fail, when set, answers each Create.
type sink struct {
	mu    sync.Mutex
	got   []*eventsv1.Event
	tries int
	fail  func(try int) error
}

func (s *sink) Create(_ context.Context, ev *eventsv1.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tries++
	if s.fail != nil {
		if err := s.fail(s.tries); err != nil {
			return err
		}
	}
	s.got = append(s.got, ev)
	return nil
}

func (s *sink) sent() ([]*eventsv1.Event, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*eventsv1.Event(nil), s.got...), s.tries
}

func pod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "u1"}}
}

func newProvider(s Sink) *Provider {
	p := New(runtime.NewScheme(), s, logr.Discard())
	p.scheme = clientgoscheme.Scheme
	p.retry = time.Millisecond
	return p
}

func TestRecorder_buildsTheEventClientGoBuilds(t *testing.T) {
	p := newProvider(&sink{})
	at := time.Date(2026, 12, 4, 18, 0, 0, 0, time.UTC)
	p.now = func() time.Time { return at }
	p.host = "op-1"
	p.GetEventRecorder("sluice-release").Eventf(pod(), nil, corev1.EventTypeWarning, "Failed", "Apply", "apply of %s failed", "v2")
	ev := <-p.queue
	require.Equal(t, fmt.Sprintf("web-0.%x", at.UnixNano()), ev.Name, "client-go's name: the object's name and the time in hex nanoseconds")
	require.Equal(t, "shop", ev.Namespace)
	require.Equal(t, "sluice-release", ev.ReportingController)
	require.Equal(t, "sluice-release-op-1", ev.ReportingInstance)
	require.Equal(t, "Apply", ev.Action)
	require.Equal(t, "Failed", ev.Reason)
	require.Equal(t, "apply of v2 failed", ev.Note)
	require.Equal(t, corev1.EventTypeWarning, ev.Type)
	require.Equal(t, "Pod", ev.Regarding.Kind)
	require.Equal(t, "web-0", ev.Regarding.Name)
	require.Nil(t, ev.Related)
	require.Nil(t, ev.Series)
}

func TestRecorder_cutsALongNoteAtACharacter(t *testing.T) {
	p := newProvider(&sink{})
	p.GetEventRecorder("x").Eventf(pod(), nil, corev1.EventTypeNormal, "R", "A", "%s", "a"+strings.Repeat("é", 600))
	ev := <-p.queue
	require.LessOrEqual(t, len(ev.Note), maxNoteLength)
	require.True(t, strings.HasPrefix(ev.Note, "aé"))
	require.NotContains(t, ev.Note, "\uFFFD")
	require.Equal(t, 1023, len(ev.Note), "511 whole two-byte characters after the a")
}

func TestRecorder_refusesWhatItCannotRecord(t *testing.T) {
	p := newProvider(&sink{})
	r := p.GetEventRecorder("x")
	r.Eventf(pod(), nil, "Unknown", "R", "A", "bad type")
	type unknown struct{ corev1.Pod }
	r.Eventf(&unknown{}, nil, corev1.EventTypeNormal, "R", "A", "kind not in the scheme")
	require.Empty(t, p.queue)
}

func TestRecorder_dropsAndCountsWhenTheQueueIsFull(t *testing.T) {
	p := newProvider(&sink{})
	r := p.GetEventRecorder("x")
	before := testutil.ToFloat64(dropped)
	for range QueueSize + 5 {
		r.Eventf(pod(), nil, corev1.EventTypeNormal, "R", "A", "n")
	}
	require.Len(t, p.queue, QueueSize, "the queue is bounded")
	require.Equal(t, 5.0, testutil.ToFloat64(dropped)-before)
}

func TestProvider_sendsEveryQueuedEvent(t *testing.T) {
	s := &sink{}
	p := newProvider(s)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Start(ctx); close(done) }()
	r := p.GetEventRecorder("x")
	for range 50 {
		r.Eventf(pod(), nil, corev1.EventTypeNormal, "R", "A", "n")
	}
	require.Eventually(t, func() bool { got, _ := s.sent(); return len(got) == 50 }, time.Minute, time.Millisecond)
	cancel()
	<-done
}

func TestProvider_triesAgainOnlyWhatMaySucceed(t *testing.T) {
	gr := schema.GroupResource{Group: "events.k8s.io", Resource: "events"}
	for _, tc := range []struct {
		name  string
		err   error
		tries int
		sent  bool
	}{
		{"an unreachable API server is tried again, and the Event goes when it answers", errors.New("connection refused"), 2, true},
		{"an overloaded API server is tried again", apierrors.NewTooManyRequests("slow down", 1), 2, true},
		{"an Event the API server refuses is not tried again", apierrors.NewBadRequest("invalid"), 1, false},
		{"an Event refused as forbidden is not tried again", apierrors.NewForbidden(gr, "x", errors.New("no")), 1, false},
		{"an Event that already exists is done", apierrors.NewAlreadyExists(gr, "x"), 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &sink{fail: func(try int) error {
				if try == 1 {
					return tc.err
				}
				return nil
			}}
			p := newProvider(s)
			ev, err := p.build(pod(), nil, corev1.EventTypeNormal, "R", "A", "n", "x", "x-h")
			require.NoError(t, err)
			p.send(context.Background(), ev)
			got, tries := s.sent()
			require.Equal(t, tc.tries, tries)
			require.Equal(t, tc.sent, len(got) == 1)
		})
	}
	t.Run("an API server unreachable for every try is given up and counted", func(t *testing.T) {
		s := &sink{fail: func(int) error { return errors.New("connection refused") }}
		p := newProvider(s)
		before := testutil.ToFloat64(dropped)
		ev, err := p.build(pod(), nil, corev1.EventTypeNormal, "R", "A", "n", "x", "x-h")
		require.NoError(t, err)
		p.send(context.Background(), ev)
		_, n := s.sent()
		require.Equal(t, tries, n)
		require.Equal(t, 1.0, testutil.ToFloat64(dropped)-before)
	})
}
