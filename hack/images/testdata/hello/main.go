// hello is the test binary of the release tests: it links a module
// dependency so that the SBOM has something to list.
package main

import (
	"fmt"

	"github.com/google/go-containerregistry/pkg/name"
)

var Version = "dev"

func main() {
	r, err := name.ParseReference("sluice-gitops/hello:" + Version)
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Name())
}
