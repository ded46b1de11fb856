package runner

import (
	"context"
	"fmt"
	"net"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
)

// DefaultStateAddr is where a state server listens when no address is
// given (--state-bind-address).
const DefaultStateAddr = ":8092"

// ServeState starts the Terraform state server that runners reach for one
// release's state each: it listens on addr (DefaultStateAddr when empty)
// until ctx ends, reads and locks state with cfg, and tells runners to
// reach it at base (BaseURL: "" means http://127.0.0.1:<port it got>).
// opts.BaseURL is set from base. The operator, the syncer and the tests
// all start it here; it returns the server and the address it listens on.
func ServeState(ctx context.Context, cfg *rest.Config, addr, base string, opts tfstate.Options) (*tfstate.Server, net.Addr, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("state server client: %w", err)
	}
	if addr == "" {
		addr = DefaultStateAddr
	}
	// Listen first: the base URL may name the port the system chose.
	lazy := &Handler{}
	bound, err := Serve(ctx, addr, lazy)
	if err != nil {
		return nil, nil, fmt.Errorf("state server listener: %w", err)
	}
	opts.BaseURL = BaseURL(base, bound)
	srv, err := tfstate.NewServer(cs, opts)
	if err != nil {
		return nil, nil, err
	}
	lazy.Set(srv.Handler())
	return srv, bound, nil
}
