// Command infra-validator checks Terraform plans, Helm charts and service
// manifests against Rego policy. See internal/cli for the commands.
package main

import (
	"os"

	"github.com/sluice-gitops/sluice/infra-validator/internal/cli"
)

func main() {
	os.Exit(cli.Run(os.Args[1:], os.Stdout, os.Stderr))
}
