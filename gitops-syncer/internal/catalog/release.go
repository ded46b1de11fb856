package catalog

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/git"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// ReleaseInputs is what one release (a service in one environment) reads:
// its own view of service.yaml (the shared fields and its own environment
// entry, never another environment's), its values files, the chart folder,
// the Terraform stack with its local modules, and whatever symlinks among
// them point at, and the check templates its verification block names
// (Argo Rollouts AnalysisTemplates, Flagger MetricTemplates). A change to
// anything else of the service folder is not a change of this release.
type ReleaseInputs struct {
	// Paths are the repository paths the release reads besides
	// service.yaml, sorted, without paths inside a listed folder.
	Paths []string
	// View is the digest of the release's view of service.yaml.
	View string
	// RemoteBases are the Kustomize remote bases the release's overlay
	// names (pinned ones only; the rest fail its validation), for the
	// syncer to fetch into its artifact.
	RemoteBases []manifest.RemoteBase
	// HelmCharts are the helmCharts entries of the release's overlay (and
	// of the kustomizations it reaches), for the syncer to resolve and
	// fetch into its artifact.
	HelmCharts []manifest.HelmChart
}

// releaseInputs computes the inputs of environment env of e, resolving
// symlinks in the skeleton under scratch. A stack whose modules cannot be
// listed (InputsErr) reads the service's fallback folders.
func releaseInputs(e *Entry, env, scratch string) (ReleaseInputs, error) {
	svc := e.Service
	view, err := View(svc, env)
	if err != nil {
		return ReleaseInputs{}, err
	}
	values, err := svc.ValuesFiles(env)
	if err != nil {
		return ReleaseInputs{}, err
	}
	var remotes []manifest.RemoteBase
	var charts []manifest.HelmChart
	queue := append([]string{}, values...)
	queue = append(queue, verificationTemplates(svc, env)...)
	if e, ok := svc.Environment(env); ok && e.Source() != manifest.SourceChart {
		// The release reads its overlay (and what the overlay's build
		// reads, bases elsewhere in the repository included) or its
		// manifests folder, not the service's chart and values. A walk
		// that fails lists what it reached; validating the release
		// reports the problem.
		if d := svc.KustomizeDir(env); d != "" {
			in, _ := manifest.KustomizeInputs(scratch, d)
			queue = append(queue, d)
			queue = append(queue, in...)
			for _, r := range manifest.KustomizeRemoteBases(scratch, d) {
				remotes = append(remotes, r.RemoteBase)
			}
			for _, h := range manifest.KustomizeHelmCharts(scratch, d) {
				charts = append(charts, h.HelmChart)
			}
		}
		if d := svc.ManifestsDir(env); d != "" {
			queue = append(queue, d)
		}
	} else if d := svc.ChartDirOf(env); d != "" {
		queue = append(queue, d)
	}
	if d := svc.TerraformDir(); d != "" {
		queue = append(queue, d)
		if e.InputsErr != nil {
			queue = append(queue, e.Inputs...)
		} else {
			mods, err := manifest.TerraformModules(scratch, d)
			if err != nil {
				return ReleaseInputs{}, err
			}
			queue = append(queue, mods...)
		}
	}
	paths, err := followSymlinks(scratch, queue)
	if err != nil {
		return ReleaseInputs{}, fmt.Errorf("service %s, environment %s: %w", svc.Name, env, err)
	}
	return ReleaseInputs{Paths: paths, View: view, RemoteBases: remotes, HelmCharts: charts}, nil
}

// followSymlinks returns paths plus the targets of every symlink at or
// below them (followed again), sorted and without covered paths. The
// manifest parser has already refused symlinks leaving the repository; one
// found here is refused again.
func followSymlinks(root string, paths []string) ([]string, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	queue := append([]string{}, paths...)
	for len(queue) > 0 {
		rel := path.Clean(queue[0])
		queue = queue[1:]
		if seen[rel] {
			continue
		}
		seen[rel] = true
		abs := filepath.Join(realRoot, filepath.FromSlash(rel))
		err := filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return nil // a missing values file is the validator's finding
				}
				return err
			}
			if d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return nil // dangling: the validator reports it
			}
			r, err := filepath.Rel(realRoot, target)
			if err != nil || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
				return fmt.Errorf("symlink %s: %w", strings.TrimPrefix(p, realRoot+string(filepath.Separator)), manifest.ErrOutsideRepo)
			}
			queue = append(queue, filepath.ToSlash(r))
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	all := make([]string, 0, len(seen))
	for p := range seen {
		all = append(all, p)
	}
	sort.Strings(all)
	var out []string
	for _, p := range all {
		if n := len(out); n > 0 && (out[n-1] == "." || p == out[n-1] || strings.HasPrefix(p, out[n-1]+"/")) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// View is the digest of environment env's view of svc: the manifest with
// every other environment left out, so editing one environment's entry
// changes no other release.
func View(svc *manifest.Service, env string) (string, error) {
	e, ok := svc.Environment(env)
	if !ok {
		return "", fmt.Errorf("service %q has no environment %q", svc.Name, env)
	}
	v := *svc
	v.Environments = []manifest.Environment{*e}
	data, err := json.Marshal(&v)
	if err != nil {
		return "", fmt.Errorf("encode the view of %s/%s: %w", svc.Name, env, err)
	}
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// Tree is the input hash of a release at commit rev: equal exactly when
// its view of service.yaml and the git objects at its input paths are.
func (in ReleaseInputs) Tree(cache *git.Repo, rev string) (string, error) {
	h, err := cache.InputsHash(rev, in.Paths)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte("view " + in.View + "\npaths " + h + "\n"))
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// ViewAt reads the manifest of the service in dir at fsys (another commit)
// and returns environment env's view of it; ok is false when the manifest
// is missing, does not parse or has no such environment.
func ViewAt(fsys fs.FS, dir, env string) (string, bool) {
	file := path.Join(dir, manifest.FileName)
	data, err := fs.ReadFile(fsys, file)
	if err != nil {
		return "", false
	}
	svc, err := manifest.Parse(data, file)
	if err != nil {
		return "", false
	}
	svc.Dir = dir
	v, err := View(svc, env)
	return v, err == nil
}

// verificationTemplates are the repository paths of the templates the
// verification block of environment env names (analysisTemplate or
// metricTemplate, relative to the service folder). A path that leaves the
// folder is left out here: building the change refuses it.
func verificationTemplates(svc *manifest.Service, env string) []string {
	e, ok := svc.Environment(env)
	if !ok || e.Verification == nil {
		return nil
	}
	refs, _ := e.Verification["templates"].([]any)
	var out []string
	for _, r := range refs {
		m, _ := r.(map[string]any)
		for _, key := range []string{"analysisTemplate", "metricTemplate"} {
			rel, _ := m[key].(string)
			if rel == "" || strings.Contains(rel, `\`) || !fs.ValidPath(rel) || rel == "." {
				continue
			}
			out = append(out, path.Join(svc.Dir, rel))
		}
	}
	return out
}
