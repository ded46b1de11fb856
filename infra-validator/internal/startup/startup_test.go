package startup

import (
	"os"
	"runtime/debug"
	"testing"
)

// TestCollectorOffUntilDone: init turned the collector off, Done turns it
// on once with the given percentage, and a second Done changes nothing.
func TestCollectorOffUntilDone(t *testing.T) {
	if _, set := os.LookupEnv("GOGC"); set {
		t.Skip("GOGC is set in the environment, so init leaves the collector alone")
	}
	if p := debug.SetGCPercent(-1); p != -1 {
		t.Fatalf("GOGC after init = %d, want -1 (off)", p)
	}
	Done(150)
	if p := debug.SetGCPercent(150); p != 150 {
		t.Fatalf("GOGC after Done(150) = %d", p)
	}
	Done(50)
	if p := debug.SetGCPercent(100); p != 150 {
		t.Fatalf("a second Done changed GOGC to %d", p)
	}
}
