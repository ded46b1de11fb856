package reconcile

import (
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The condition types a Summary writes (kstatus' names, Progressing for
// kstatus' Reconciling).
const (
	// ConditionReady summarises the object.
	ConditionReady = "Ready"
	// ConditionStalled is True while only an administrator can help.
	ConditionStalled = "Stalled"
	// ConditionProgressing is True while the object waits for another
	// system.
	ConditionProgressing = "Progressing"
)

// DefaultMaxMessage bounds condition messages when Summary.MaxMessage is
// zero (the API allows 32768; status stays readable).
const DefaultMaxMessage = 1024

// Summary points at the summary fields of one object's status: its
// conditions and, when the reconciler owns it, its observedGeneration.
// It writes them in memory; the Helper writes them to the API server.
type Summary struct {
	// Conditions is &obj.Status.Conditions.
	Conditions *[]metav1.Condition
	// ObservedGeneration is &obj.Status.ObservedGeneration; nil when
	// another reconciler owns it.
	ObservedGeneration *int64
	// Generation is obj.Generation.
	Generation int64
	// MaxMessage bounds messages in bytes, "…" included, cut on a rune
	// boundary; DefaultMaxMessage when zero.
	MaxMessage int
}

// Ready is what a pass says of the Ready condition. An empty Reason
// leaves Ready as it is.
type Ready struct {
	Status          metav1.ConditionStatus
	Reason, Message string
}

// Set sets condition typ (its lastTransitionTime moves only when its
// status does).
func (s Summary) Set(typ string, status metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(s.Conditions, metav1.Condition{
		Type:               typ,
		Status:             status,
		Reason:             reason,
		Message:            s.Truncate(message),
		ObservedGeneration: s.Generation,
	})
}

// Remove removes the conditions of the given types.
func (s Summary) Remove(types ...string) {
	for _, t := range types {
		meta.RemoveStatusCondition(s.Conditions, t)
	}
}

// Conclude writes what a pass that ended in res concluded, once, at its
// end:
//
//   - a Failure concludes nothing: observedGeneration and the conditions
//     stay as they were, so a user can tell a processed generation from a
//     failed one;
//   - Stalled sets Stalled=True and Ready=False with its reason and
//     message, and removes Progressing;
//   - Waiting sets Progressing=True and Ready=False with its reason and
//     message, and removes Stalled;
//   - anything else removes both and sets Ready as ready says.
//
// Then observedGeneration (when owned) is the object's generation.
func (s Summary) Conclude(res Result, ready Ready) {
	switch res.kind {
	case KindFailure:
		return
	case KindStalled:
		s.Remove(ConditionProgressing)
		s.Set(ConditionStalled, metav1.ConditionTrue, res.reason, res.message)
		ready = Ready{Status: metav1.ConditionFalse, Reason: res.reason, Message: res.message}
	case KindWaiting:
		s.Remove(ConditionStalled)
		s.Set(ConditionProgressing, metav1.ConditionTrue, res.reason, res.message)
		ready = Ready{Status: metav1.ConditionFalse, Reason: res.reason, Message: res.message}
	default:
		s.Remove(ConditionStalled, ConditionProgressing)
	}
	if ready.Reason != "" {
		s.Set(ConditionReady, ready.Status, ready.Reason, ready.Message)
	}
	s.Observe()
}

// Observe records that the pass processed the object's generation (only
// after a pass without failure; Conclude calls it).
func (s Summary) Observe() {
	if s.ObservedGeneration != nil {
		*s.ObservedGeneration = s.Generation
	}
}

// Truncate bounds msg to MaxMessage bytes on a rune boundary, "…"
// included, and makes it valid UTF-8.
func (s Summary) Truncate(msg string) string {
	n := s.MaxMessage
	if n <= 0 {
		n = DefaultMaxMessage
	}
	return Truncate(msg, n-len("…"))
}

// Truncate cuts s to at most n bytes on a rune boundary and appends "…"
// when it cut; invalid UTF-8 becomes U+FFFD first.
func Truncate(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	n = max(n, 0)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
