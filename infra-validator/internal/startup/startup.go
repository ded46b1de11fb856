// Package startup keeps the garbage collector off while the CLI's packages
// initialise. The validator links the Helm SDK, client-go and OPA, whose
// package initialisers allocate about 15 MB (API schemes, JSON schemas);
// collecting during that allocation costs a few milliseconds of every run,
// which matters to a CLI that checks a small plan in about as long. main
// imports this package and calls Done before doing anything else. A GOGC
// set in the environment is left alone.
package startup

import (
	"os"
	"runtime/debug"
)

// off records that init turned the collector off.
var off bool

func init() {
	if _, set := os.LookupEnv("GOGC"); set {
		return
	}
	debug.SetGCPercent(-1)
	off = true
}

// Done turns the collector back on with the given GOGC percentage, unless
// GOGC is set in the environment (which then applies throughout).
func Done(percent int) {
	if off {
		debug.SetGCPercent(percent)
		off = false
	}
}
