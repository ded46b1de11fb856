package changespec

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// AbsentError says the release did not exist at a revision: the service
// folder held no service.yaml there, or the manifest had no such
// environment. A pull request's preview rates a release that is new at its
// base as all new; a branch change reports it (its base was applied, so the
// release existed).
type AbsentError struct{ msg string }

func (e *AbsentError) Error() string { return e.msg }

// ExtractRelease writes the release (service folder svcDir, holding service
// with environment env) as it was at commit rev into dir, an empty folder:
// the service folder, its chart folder and Terraform folder (and what a
// Kustomize overlay of env reads elsewhere in the repository), through the
// artifact builder and extractor so symlinks and paths stay confined. It
// returns the parsed manifest: the "previous" release a change's Helm risk
// is rated against, for the branch sync and previews alike. A release that
// did not exist at rev is an *AbsentError.
func ExtractRelease(cache *git.Repo, rev, svcDir, service, env, dir string) (*manifest.Service, error) {
	short := sluicev1.ShortSHA(rev)
	if !cache.HasCommit(rev) {
		return nil, fmt.Errorf("commit %s is not in the local git cache", short)
	}
	fsys, err := cache.FS(rev)
	if err != nil {
		return nil, err
	}
	file := path.Join(svcDir, manifest.FileName)
	data, err := fs.ReadFile(fsys, file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &AbsentError{msg: fmt.Sprintf("%s does not exist at %s", file, short)}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s at %s: %w", file, short, err)
	}
	svc, err := manifest.Parse(data, file)
	if err != nil {
		return nil, fmt.Errorf("at %s: %w", short, err)
	}
	svc.Dir = svcDir
	if svc.Name != service {
		return nil, fmt.Errorf("%s at %s names service %q, not %q", file, short, svc.Name, service)
	}
	if _, ok := svc.Environment(env); !ok {
		return nil, &AbsentError{msg: fmt.Sprintf("%s at %s has no environment %q", file, short, env)}
	}
	folders := Folders(svc)
	if d := svc.KustomizeDir(env); d != "" {
		// The overlay's bases may be anywhere in the repository: walk it
		// on a skeleton of the commit, as the catalog does.
		in, err := kustomizeInputs(fsys, d, dir)
		if err != nil {
			return nil, fmt.Errorf("kustomize inputs at %s: %w", short, err)
		}
		folders = append(folders, in...)
	}
	art, err := artifact.Build(fsys, folders)
	if err != nil {
		return nil, fmt.Errorf("collect inputs at %s: %w", short, err)
	}
	if err := artifact.Extract(art.TarGz, dir); err != nil {
		return nil, fmt.Errorf("extract inputs at %s: %w", short, err)
	}
	return svc, nil
}

// kustomizeInputs walks the overlay in folder overlay of fsys on a
// skeleton of fsys (WriteSkeleton) in a scratch folder beside dir and
// returns what its build reads; a walk that fails returns what it reached.
func kustomizeInputs(fsys fs.FS, overlay, dir string) ([]string, error) {
	scratch, err := os.MkdirTemp(filepath.Dir(dir), "skeleton-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	if err := WriteSkeleton(fsys, scratch); err != nil {
		return nil, err
	}
	in, _ := manifest.KustomizeInputs(scratch, overlay)
	return in, nil
}
