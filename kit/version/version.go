// Package version holds build information stamped by the Makefile with
// -ldflags -X (Go embeds no VCS stamp on our build machines).
package version

import (
	"fmt"
	"runtime"
)

var (
	// Version is the release version, e.g. v0.1.0 or a git describe string.
	Version = "dev"
	// Commit is the git commit the binary was built from.
	Commit = "unknown"
	// Date is the build time in RFC 3339.
	Date = "unknown"
)

// String is the one-line build information printed by --version.
func String(binary string) string {
	return fmt.Sprintf("%s %s (commit %s, built %s, %s %s/%s)", binary, Version, Commit, Date, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
