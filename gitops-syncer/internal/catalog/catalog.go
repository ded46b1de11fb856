// Package catalog finds the services of an infra repository at one commit:
// every folder under the services path holding a service.yaml, parsed with
// the validator's manifest parser, with the list of repository paths each
// service depends on (its inputs).
package catalog

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/changespec"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// Entry is one service folder.
type Entry struct {
	// Dir is the service folder, relative to the repository root.
	Dir string
	// Service is the parsed manifest; nil when Err is set.
	Service *manifest.Service
	// Inputs are the repository paths the service depends on.
	Inputs []string
	// Err says why the service cannot be used (a *manifest.Error for a bad
	// manifest, a path leaving the repository).
	Err error
	// InputsErr says why the Terraform stack's local modules could not be
	// listed (a .tf file that does not parse, a missing module folder).
	// Inputs then fall back to the service, chart and Terraform folders,
	// and validating the release lets terraform report the problem. A path
	// leaving the repository is Err, never InputsErr.
	InputsErr error
	// Releases are the inputs of each environment's release, by
	// environment name: what a change of that release is detected by.
	Releases map[string]ReleaseInputs
}

// ErrNoServicesPath says the services folder does not exist at the commit.
var ErrNoServicesPath = errors.New("services folder not found")

// Discover lists the services under servicesPath in fsys (a commit's tree).
// scratch is an empty folder it may use: the manifest parser reads Terraform
// files and follows symlinks on disk, so a skeleton of the commit (every
// folder and symlink, the manifests and Terraform files, empty placeholders
// for other files) is written there; no other file content is read.
func Discover(fsys fs.FS, servicesPath, scratch string) ([]Entry, error) {
	base := strings.Trim(path.Clean("/"+servicesPath), "/")
	if base == "" {
		base = "."
	}
	dirs, err := fs.ReadDir(fsys, base)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoServicesPath, base)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", base, err)
	}
	var entries []Entry
	for _, d := range dirs {
		if !d.IsDir() {
			continue
		}
		dir := path.Join(base, d.Name())
		if _, err := fs.Stat(fsys, path.Join(dir, manifest.FileName)); err != nil {
			continue // not a service folder
		}
		entries = append(entries, Entry{Dir: dir})
	}
	if len(entries) == 0 {
		return nil, nil
	}
	if err := changespec.WriteSkeleton(fsys, scratch); err != nil {
		return nil, fmt.Errorf("prepare manifest checks: %w", err)
	}
	for i := range entries {
		e := &entries[i]
		file := path.Join(e.Dir, manifest.FileName)
		data, err := fs.ReadFile(fsys, file)
		if err != nil {
			e.Err = fmt.Errorf("read %s: %w", file, err)
			continue
		}
		svc, err := manifest.Parse(data, file)
		if err != nil {
			e.Err = err
			continue
		}
		svc.Dir = e.Dir
		inputs, err := svc.Inputs(scratch)
		switch {
		case err != nil && (errors.Is(err, manifest.ErrOutsideRepo) || svc.TerraformDir() == ""):
			e.Err = err
			continue
		case err != nil:
			// The release can still be named and validated: terraform
			// says what is wrong with the stack, in a ChangeRequest.
			e.InputsErr = err
			inputs = fallbackInputs(svc)
		}
		e.Service, e.Inputs = svc, inputs
		e.Releases = map[string]ReleaseInputs{}
		for _, env := range svc.Environments {
			in, err := releaseInputs(e, env.Name, scratch)
			if err != nil {
				e.Err, e.Service, e.Inputs, e.Releases = err, nil, nil, nil
				break
			}
			e.Releases[env.Name] = in
		}
	}
	return entries, nil
}

// fallbackInputs are the service, chart and Terraform folders of svc,
// sorted, without folders inside another listed one.
func fallbackInputs(svc *manifest.Service) []string {
	var dirs []string
	for _, d := range changespec.Folders(svc) {
		if d != "" {
			dirs = append(dirs, path.Clean(d))
		}
	}
	sort.Strings(dirs)
	var out []string
	for _, d := range dirs {
		if n := len(out); n > 0 && (d == out[n-1] || strings.HasPrefix(d, out[n-1]+"/")) {
			continue
		}
		out = append(out, d)
	}
	return out
}
