package sources

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// Kustomize builds the Kustomize overlay in the repo-relative folder dir
// of the checkout at repoRoot, in-process, and returns its output as one
// file named after the overlay's kustomization file.
//
// The overlay is first walked by manifest.KustomizeInputs, which refuses
// with file and line a path that is absolute, leaves the repository or
// does not exist, a remote base or helmCharts chart not fetched, and exec
// or container KRM functions; each helmCharts entry's fetched chart is
// checked against its digest. The build then runs with every plugin but
// Kustomize's builtins off, Kustomize's Helm inflation off (the entries
// are rendered with the Helm SDK by the file system, inflate.go), and a
// read-only file system that refuses any path outside the repository
// (symlinks resolved), so a path the walk missed still cannot leave it.
func Kustomize(repoRoot, dir string) (File, error) {
	if _, err := manifest.KustomizeInputs(repoRoot, dir); err != nil {
		return File{}, err
	}
	// Each helmCharts entry's fetched chart must be the one the entry
	// names, with the bytes of its recorded digest.
	var problems []manifest.Problem
	for _, h := range manifest.KustomizeHelmCharts(repoRoot, dir) {
		if _, _, err := KustomizeChart(repoRoot, h.HelmChart); err != nil {
			at := h.At
			at.Message = fmt.Sprintf("helmCharts %s: %v", h.HelmChart, err)
			problems = append(problems, at)
		}
	}
	if len(problems) > 0 {
		return File{}, &manifest.Error{Problems: problems}
	}
	dir = path.Clean(dir)
	file := path.Join(dir, manifest.KustomizationFiles[0])
	for _, name := range manifest.KustomizationFiles {
		if p, err := manifest.ConfinedPath(repoRoot, path.Join(dir, name)); err == nil && p != "" {
			file = path.Join(dir, name)
			break
		}
	}
	fsys, err := newConfinedFS(repoRoot)
	if err != nil {
		return File{}, err
	}
	opts := krusty.MakeDefaultOptions()
	// Files of an overlay may come from anywhere in the repository (the
	// confined file system keeps them there), as with `kustomize build
	// --load-restrictor LoadRestrictionsNone` inside a checkout.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	opts.PluginConfig = types.DisabledPluginConfig()
	opts.PluginConfig.HelmConfig.Enabled = false
	k := krusty.MakeKustomizer(opts)
	m, err := k.Run(fsys, filepath.Join(fsys.root, filepath.FromSlash(dir)))
	if err != nil {
		if *fsys.inflateErr != nil {
			err = *fsys.inflateErr
		}
		return File{}, &manifest.Error{Problems: []manifest.Problem{{File: file, Message: "kustomize build: " + scrub(err, fsys.root)}}}
	}
	out, err := m.AsYaml()
	if err != nil {
		return File{}, &manifest.Error{Problems: []manifest.Problem{{File: file, Message: "kustomize output: " + scrub(err, fsys.root)}}}
	}
	if len(out) > maxTotalSize {
		return File{}, &manifest.Error{Problems: []manifest.Problem{{File: file, Message: fmt.Sprintf("kustomize output is larger than %d bytes", maxTotalSize)}}}
	}
	return File{Path: file, Data: out}, nil
}

// scrub names repository paths only in a Kustomize error (its messages
// carry absolute paths of the checkout).
func scrub(err error, root string) string {
	msg := strings.ReplaceAll(err.Error(), root+"/", "")
	return strings.ReplaceAll(msg, root, ".")
}
