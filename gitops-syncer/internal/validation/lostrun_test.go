package validation_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/tfstate"
)

// failingRunner is a terraform runner whose every plan fails with err.
type failingRunner struct{ err error }

func (r failingRunner) RunPlan(context.Context, terraform.PlanOptions) ([]byte, []byte, error) {
	return nil, nil, r.err
}

func (r failingRunner) RunApply(context.Context, terraform.ApplyOptions) (terraform.ApplyResult, error) {
	return terraform.ApplyResult{}, r.err
}

// revocations records the credentials granted and revoked (the state
// server's own Revoke is tested against the API server in tfstate).
type revocations struct {
	mu               sync.Mutex
	granted, revoked []string
}

func (g *revocations) Grant(gr tfstate.Grant) (tfstate.Credential, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	pass := fmt.Sprintf("run-%d", len(g.granted))
	g.granted = append(g.granted, pass)
	return tfstate.Credential{Address: "http://127.0.0.1:1/tfstate/team/default/db-staging", Username: tfstate.Username, Password: pass}, nil
}

func (g *revocations) Revoke(_ context.Context, c tfstate.Credential) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.revoked = append(g.revoked, c.Password)
	return nil
}

// TestLibrary_aLostPlanRunsCredentialIsRevoked: a plan whose runner died
// without a result has its credential revoked (freeing its lock at once);
// a plan that failed otherwise keeps it until it expires, as terraform
// released its lock itself.
func TestLibrary_aLostPlanRunsCredentialIsRevoked(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		revoke bool
	}{
		{"a lost runner", fmt.Errorf("%w: the runner child ended (signal: killed) without a result", terraform.ErrRunnerLost), true},
		{"a failing back end", errors.New("terraform plan: the state server answered 503"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			granter := &revocations{}
			lib, err := validation.NewLibrary(context.Background(), validation.LibraryOptions{Runner: failingRunner{tc.err}, State: granter})
			require.NoError(t, err)
			root := t.TempDir()
			write(t, root, "charts/app/Chart.yaml", "apiVersion: v2\nname: app\nversion: 0.1.0\n")
			write(t, root, "services/db/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: db\nchart: {path: charts/app}\nterraform: {dir: terraform}\nenvironments:\n  - name: staging\n    namespace: db-staging\n")
			write(t, root, "services/db/terraform/main.tf", "resource \"terraform_data\" \"a\" {}\n")
			svc, err := manifest.Load(root, "services/db")
			require.NoError(t, err)
			_, err = lib.Validate(context.Background(), validation.Request{RepoRoot: root, Service: svc, Environment: "staging", ControlNamespace: "team", Release: "db-staging"})
			require.Error(t, err, "the sync is retried")
			require.Len(t, granter.granted, 1)
			if tc.revoke {
				require.Equal(t, granter.granted, granter.revoked)
			} else {
				require.Empty(t, granter.revoked)
			}
		})
	}
}
