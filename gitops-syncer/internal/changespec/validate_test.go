package changespec_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
)

// recordingValidator is a stand-in for the validator library in this unit
// test of one step: it records what it was asked and what it saw on disk.
type recordingValidator struct {
	req      validation.Request
	manifest []byte
	err      error
}

func (v *recordingValidator) Validate(_ context.Context, req validation.Request) (*validation.Result, error) {
	v.req = req
	v.manifest, _ = os.ReadFile(filepath.Join(req.RepoRoot, "services/web/service.yaml"))
	if v.err != nil {
		return nil, v.err
	}
	return &validation.Result{ManifestDigest: "sha256:x"}, nil
}

func TestValidate_validatesTheArtifactAsExtractedAndLeavesNothingBehind(t *testing.T) {
	art, err := artifact.Build(fstest.MapFS{"services/web/service.yaml": {Data: []byte("name: web\n")}}, []string{"services/web"})
	require.NoError(t, err)
	req := validation.Request{Release: "web-staging", Environment: "staging"}

	t.Run("the validator sees the extracted artifact and the previous release", func(t *testing.T) {
		scratch := t.TempDir()
		v := &recordingValidator{}
		var previousDir string
		res, err := changespec.Validate(context.Background(), v, scratch, "validate-", art, req, func(dir string) (*validation.Previous, error) {
			previousDir = dir
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Empty(t, entries, "the previous release goes into an empty folder")
			return &validation.Previous{Revision: "c1", RepoRoot: dir}, nil
		})
		require.NoError(t, err)
		assert.EqualValues(t, "sha256:x", res.ManifestDigest)
		assert.Equal(t, "name: web\n", string(v.manifest))
		assert.Equal(t, "web-staging", v.req.Release)
		require.NotNil(t, v.req.Previous)
		assert.Equal(t, previousDir, v.req.Previous.RepoRoot)
		left, _ := os.ReadDir(scratch)
		assert.Empty(t, left, "the workspace is removed")
	})
	t.Run("no previous release: none is passed", func(t *testing.T) {
		v := &recordingValidator{}
		_, err := changespec.Validate(context.Background(), v, t.TempDir(), "validate-", art, req, nil)
		require.NoError(t, err)
		assert.Nil(t, v.req.Previous)
	})
	t.Run("a previous release that cannot be looked up ends it before validating", func(t *testing.T) {
		v := &recordingValidator{}
		scratch := t.TempDir()
		_, err := changespec.Validate(context.Background(), v, scratch, "validate-", art, req, func(string) (*validation.Previous, error) {
			return nil, errors.New("read release web-staging: timeout")
		})
		assert.ErrorContains(t, err, "read release web-staging")
		assert.Empty(t, v.req.Release, "the validator was not asked")
		left, _ := os.ReadDir(scratch)
		assert.Empty(t, left)
	})
	t.Run("a validator error names the release", func(t *testing.T) {
		v := &recordingValidator{err: errors.New("helm render failed")}
		_, err := changespec.Validate(context.Background(), v, t.TempDir(), "validate-", art, req, nil)
		assert.ErrorContains(t, err, "validate web-staging: helm render failed")
	})
	t.Run("no validator configured", func(t *testing.T) {
		_, err := changespec.Validate(context.Background(), nil, t.TempDir(), "validate-", art, req, nil)
		assert.ErrorIs(t, err, changespec.ErrNoValidator)
	})
}
