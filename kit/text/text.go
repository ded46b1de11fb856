package text

import "github.com/sluice-gitops/sluice/runtime/reconcile"

// Truncate makes s valid UTF-8 and cuts it to at most n bytes on a rune
// boundary, marking a cut with "…" (three more bytes). Status messages,
// events and findings go through it: the API server refuses a write whose
// strings are not valid UTF-8, so a cut inside a character would lose the
// whole status update. It is the reconcile runtime's rule, named here for
// the callers that are not reconcilers.
func Truncate(s string, n int) string { return reconcile.Truncate(s, n) }
