// Command kubectl-sluice is the Sluice kubectl plugin (`kubectl sluice`):
// list, describe, approve, reject, revoke and wait for ChangeRequests. The
// logic lives in operator/internal/plugin.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluice-gitops/sluice/operator/internal/plugin"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := plugin.Execute(ctx, os.Args[1:])
	stop()
	os.Exit(code)
}
