package changespec

import (
	"context"
	"errors"
	"fmt"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
)

// ErrNoValidator says no validator is configured.
var ErrNoValidator = errors.New("no validator configured")

// Validate has v validate art exactly as it will be applied, for branch
// changes and previews alike: art is extracted into a private workspace
// under scratchDir (NewWorkspace, removed after), req.RepoRoot is its
// Current folder, and previous, when not nil, describes the release at an
// earlier revision for the Helm risk, written into the workspace's empty
// Previous folder; an error of previous ends the validation.
func Validate(ctx context.Context, v validation.Validator, scratchDir, prefix string, art *artifact.Artifact, req validation.Request,
	previous func(dir string) (*validation.Previous, error)) (*validation.Result, error) {
	if v == nil {
		return nil, ErrNoValidator
	}
	ws, err := NewWorkspace(scratchDir, prefix, art.TarGz)
	if err != nil {
		return nil, err
	}
	defer ws.Remove()
	req.RepoRoot = ws.Current
	if previous != nil {
		if req.Previous, err = previous(ws.Previous); err != nil {
			return nil, err
		}
	}
	res, err := v.Validate(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("validate %s: %w", req.Release, err)
	}
	return res, nil
}
