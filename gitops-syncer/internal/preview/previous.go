package preview

import (
	"errors"
	"fmt"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"io/fs"
	"path"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// previousAt describes the release (service svc, environment env) at the
// pull request's base for the validator, which rates the Helm risk of the
// preview against it, as the syncer rates a branch change against the
// release's previous revision. The service and chart folders at base are
// extracted into dir (an empty folder) through the artifact builder, so
// paths stay confined. It never fails: nil when the release is new at
// base, Err set when base cannot be read.
func previousAt(cache *git.Repo, base, svcDir, svcName, env, dir string) *validation.Previous {
	prev := &validation.Previous{Revision: base}
	fsys, err := cache.FS(base)
	if err != nil {
		prev.Err = err
		return prev
	}
	file := path.Join(svcDir, manifest.FileName)
	data, err := fs.ReadFile(fsys, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a new service: every object is new
	}
	if err != nil {
		prev.Err = fmt.Errorf("read %s at %s: %w", file, sluicev1.ShortSHA(base), err)
		return prev
	}
	svc, err := manifest.Parse(data, file)
	if err != nil {
		prev.Err = fmt.Errorf("at %s: %w", sluicev1.ShortSHA(base), err)
		return prev
	}
	svc.Dir = svcDir
	if svc.Name != svcName {
		prev.Err = fmt.Errorf("%s at %s names service %q, not %q", file, sluicev1.ShortSHA(base), svc.Name, svcName)
		return prev
	}
	if _, ok := svc.Environment(env); !ok {
		return nil // a new environment
	}
	art, err := artifact.Build(fsys, changespec.Folders(svc))
	if err != nil {
		prev.Err = fmt.Errorf("collect inputs at %s: %w", sluicev1.ShortSHA(base), err)
		return prev
	}
	if err := artifact.Extract(art.TarGz, dir); err != nil {
		prev.Err = fmt.Errorf("extract inputs at %s: %w", sluicev1.ShortSHA(base), err)
		return prev
	}
	prev.RepoRoot, prev.Service = dir, svc
	return prev
}
