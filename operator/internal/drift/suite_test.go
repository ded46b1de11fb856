package drift

import (
	"fmt"
	"os"
	"testing"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/runner"
	"github.com/sluice-gitops/sluice/kit/testenv"
	"github.com/sluice-gitops/sluice/operator/internal/applier/argocd/argocdtest"
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
	// The Argo CD tests and benchmark keep Applications.
	crds, err := argocdtest.CRDPaths()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: crds}, func(e *testenv.Env) error {
		env, server = e, artifacttest.NewServer()
		e.Cleanup(server.Close)
		return nil
	})
}
