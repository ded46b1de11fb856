// Package tfstatetest serves Terraform state to the tests of every module
// as the syncer and the operator do: a tfstate.Server acting with a given
// connection, on a loopback port, and credentials it grants.
package tfstatetest

import (
	"context"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
)

// Serve starts a state server that reads and writes state with cfg (so
// only cfg's rights apply), listening on a loopback port until ctx ends.
// opts.BaseURL is set to where it listens.
func Serve(ctx context.Context, cfg *rest.Config, opts tfstate.Options) (*tfstate.Server, error) {
	s, _, err := runner.ServeState(ctx, cfg, "127.0.0.1:0", "", opts)
	return s, err
}

// New is Serve for one test: the server stops when tb ends, and an error
// fails tb.
func New(tb testing.TB, cfg *rest.Config, opts tfstate.Options) *tfstate.Server {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	s, err := Serve(ctx, cfg, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

// Grant is s.Grant for a test: an error fails tb.
func Grant(tb testing.TB, s *tfstate.Server, g tfstate.Grant) tfstate.Credential {
	tb.Helper()
	cred, err := s.Grant(g)
	if err != nil {
		tb.Fatal(err)
	}
	return cred
}
