// Command registry is the CNCF distribution registry (distribution/v3's
// cmd/registry) for the tests: `make registry` builds it from this module
// into bin/registry/<version>/registry. It lives in its own module so that
// the registry's dependencies never enter a project module's go.mod.
package main

import (
	_ "net/http/pprof"

	"github.com/distribution/distribution/v3/registry"
	_ "github.com/distribution/distribution/v3/registry/auth/htpasswd"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/filesystem"
	_ "github.com/distribution/distribution/v3/registry/storage/driver/inmemory"
)

func main() {
	// Execute exits with a non-zero code itself on failure.
	_ = registry.RootCmd.Execute()
}
