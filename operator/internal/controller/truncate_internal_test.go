package controller

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// A status message with multi-byte characters at the cut stays valid UTF-8
// (the API server refuses the whole status write otherwise) and within
// maxMessage bytes.
func TestTruncate_aLongMessageIsCutOnACharacterBoundary(t *testing.T) {
	for _, s := range []string{strings.Repeat("é", maxMessage), strings.Repeat("€", maxMessage), "x" + strings.Repeat("€", maxMessage)} {
		got := truncate(s)
		if !utf8.ValidString(got) || len(got) > maxMessage || !strings.HasSuffix(got, "…") {
			t.Fatalf("truncate gave %d bytes, valid UTF-8 %v: %q", len(got), utf8.ValidString(got), got[len(got)-8:])
		}
	}
}
