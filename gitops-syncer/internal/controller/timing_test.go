package controller_test

import "time"

// timeout bounds how long a test waits for the syncer to act; it is a
// failure bound for a stuck test, not a performance assertion.
const (
	timeout = 2 * time.Minute
	tick    = 50 * time.Millisecond
)
