package preview

import (
	"errors"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
)

// previousAt describes the release (service svc, environment env) at the
// pull request's base for the validator, which rates the Helm risk of the
// preview against it, as the syncer rates a branch change against the
// release's previous revision: the same changespec.ExtractRelease writes
// its folders at base into dir (an empty folder). It never fails: nil when
// the release is new at base (every object is new), Err set when base
// cannot be read.
func previousAt(cache *git.Repo, base, svcDir, svcName, env, dir string) *validation.Previous {
	svc, err := changespec.ExtractRelease(cache, base, svcDir, svcName, env, dir)
	var absent *changespec.AbsentError
	if errors.As(err, &absent) {
		return nil
	}
	prev := &validation.Previous{Revision: base, Err: err}
	if err == nil {
		prev.RepoRoot, prev.Service = dir, svc
	}
	return prev
}
