package drift

import (
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/operator/api/testenv"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
)

var (
	env    *testenv.Env
	server *artifacttest.Server
)

func TestMain(m *testing.M) {
	// The Terraform checker's runs re-execute this test binary as the
	// sandboxed runner child.
	runner.MaybeRunChild()
	testenv.Main(m, testenv.Options{}, func(e *testenv.Env) error {
		env, server = e, artifacttest.NewServer()
		e.Cleanup(server.Close)
		return nil
	})
}
