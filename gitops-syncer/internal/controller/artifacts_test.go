package controller_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestArtifacts_losingStorageLosesNothing(t *testing.T) {
	ns := newNamespace(t)
	root := t.TempDir()
	fixture := seedHelmRepo(t, root, "infra")
	s := startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))
	cr := changeRequests(t, ns)[sluicev1.ChangeRequestName("beta-staging", fixture.Head("main"), 1)]
	require.NotEmpty(t, cr.Name)
	before, sum := download(t, cr.Spec.Artifact.URL)
	require.Equal(t, string(cr.Spec.Artifact.SHA256), sum)

	// The storage volume and the git cache are both lost.
	require.NoError(t, os.RemoveAll(filepath.Join(s.dataDir, "artifacts")))
	require.NoError(t, os.RemoveAll(filepath.Join(s.dataDir, "git")))
	after, sum2 := download(t, cr.Spec.Artifact.URL)
	assert.Equal(t, before, after, "a rebuilt artifact has the same bytes")
	assert.Equal(t, sum, sum2)
}
