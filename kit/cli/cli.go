// Package cli is the start of every Sluice binary that runs a manager: the
// flags they share (--version, --namespaces and controller-runtime's zap
// logging flags), the logger, and tracing.
package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/sluice-gitops/sluice/kit/tracing"
	"github.com/sluice-gitops/sluice/kit/version"
)

// Common holds the flags every Sluice binary shares.
type Common struct {
	// Binary names the program in --version and in its traces.
	Binary string

	showVersion bool
	namespaces  string
	zap         zap.Options
}

// Bind registers --version, --namespaces (with namespacesHelp) and the zap
// logging flags on fs.
func (c *Common) Bind(fs *flag.FlagSet, namespacesHelp string) {
	fs.BoolVar(&c.showVersion, "version", false, "Print the version and exit.")
	fs.StringVar(&c.namespaces, "namespaces", "", namespacesHelp)
	c.zap.BindFlags(fs)
}

// Start runs after the flags are parsed. With --version it prints the
// build information to w and returns done (the caller exits 0); otherwise
// it installs the zap logger as controller-runtime's and returns the
// setup logger.
func (c *Common) Start(w io.Writer) (log logr.Logger, done bool) {
	if c.showVersion {
		fmt.Fprintln(w, version.String(c.Binary))
		return logr.Discard(), true
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&c.zap)))
	return ctrl.Log.WithName("setup"), false
}

// Namespaces is --namespaces split at its commas; nil (all) when empty.
func (c *Common) Namespaces() []string {
	if c.namespaces == "" {
		return nil
	}
	return strings.Split(c.namespaces, ",")
}

// Tracing installs the binary's tracer provider: trace ids always; spans
// leave the process only when an OTLP endpoint is configured
// (OTEL_EXPORTER_OTLP_ENDPOINT). The returned function flushes it and
// never fails the caller.
func (c *Common) Tracing(ctx context.Context) (stop func(), err error) {
	shutdown, err := tracing.Setup(ctx, c.Binary, version.Version)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	return func() { _ = shutdown(context.WithoutCancel(ctx)) }, nil
}
