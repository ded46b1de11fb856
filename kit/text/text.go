package text

import (
	"strings"
	"unicode/utf8"
)

// Truncate makes s valid UTF-8 and cuts it to at most n bytes on a rune
// boundary, marking a cut with "…" (three more bytes). Status messages,
// events and findings go through it: the API server refuses a write whose
// strings are not valid UTF-8, so a cut inside a character would lose the
// whole status update.
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
