package terraform

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPrepared_servesOneRunInTheCurrentFolderOnly: a handle runs terraform
// in the process's current folder, so it is handed out once and only for
// that folder; a plan there uses it and succeeds.
func TestPrepared_servesOneRunInTheCurrentFolderOnly(t *testing.T) {
	tfPath, err := exec.LookPath("terraform")
	require.NoError(t, err, "terraform is needed on PATH")
	stack := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(stack, "main.tf"), []byte("resource \"terraform_data\" \"x\" {\n  input = \"a\"\n}\n"), 0o644))
	other := t.TempDir()
	t.Chdir(stack)

	p, err := Prepare(context.Background(), tfPath)
	require.NoError(t, err)
	p.Wait()
	require.Nil(t, p.take(other), "another folder gets a handle of its own")

	_, planJSON, err := PlanFiles(context.Background(), PlanOptions{ExecOptions: ExecOptions{ExecPath: tfPath, Prepared: p}, Dir: stack})
	require.NoError(t, err)
	require.Contains(t, string(planJSON), "terraform_data.x")
	require.Nil(t, p.take(stack), "the handle served its one run")
}
