package drift

import (
	"github.com/sluice-gitops/sluice/kit/testenv"
	"github.com/sluice-gitops/sluice/operator/internal/artifact/artifacttest"
)

// SharedEnv is the envtest and the artifact server of this test binary, for
// the external audit tests.
func SharedEnv() (*testenv.Env, *artifacttest.Server) { return env, server }
