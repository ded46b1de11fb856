// Package appliertest holds what the appliers' tests share.
package appliertest

import (
	"crypto/rand"
	"encoding/hex"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
	"github.com/sluice-gitops/sluice/operator/internal/applier"
)

// RandomSHA is a random 40-hex-digit commit id.
func RandomSHA() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// RequireFailure checks err is a permanent applier failure with reason and
// returns it.
func RequireFailure(t testing.TB, err error, reason string) *applier.Failure {
	t.Helper()
	fail, ok := applier.AsFailure(err)
	require.True(t, ok, "want a permanent failure with reason %s, got %v", reason, err)
	require.Equal(t, reason, fail.Reason, fail.Error())
	return fail
}

// TerraformStack is a stack of the built-in terraform_data resource (it
// needs no provider download) with one variable, size, and an output.
const TerraformStack = `variable "size" {
  type = string
}

resource "terraform_data" "db" {
  input = "db-${var.size}"
}

output "db" {
  value = terraform_data.db.output
}
`

// SourceOf is the ChangeSource the syncer records on a change of a Release
// with this spec: the tests write a Release's spec and the change's source
// from the same values, and change one of them to play a later push.
func SourceOf(spec sluicev1.ReleaseSpec) *sluicev1.ChangeSource {
	return &sluicev1.ChangeSource{
		Service: spec.Service, Environment: spec.Environment, Path: spec.SourcePath,
		Chart: spec.Chart, Values: slices.Clone(spec.Values), Terraform: spec.Terraform.DeepCopy(),
	}
}
