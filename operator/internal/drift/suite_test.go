package drift

import (
	"fmt"
	"os"
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
	var err error
	env, err = testenv.Start(testenv.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server = artifacttest.NewServer()
	code := m.Run()
	server.Close()
	_ = env.Stop()
	os.Exit(code)
}
