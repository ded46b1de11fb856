package sources

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
)

// maxManifestFiles bounds how many files one manifests folder may hold.
const maxManifestFiles = 2000

// Manifests reads the plain manifests of the repo-relative folder dir of
// the checkout at repoRoot: every *.yaml, *.yml and *.json file (in
// subfolders too when m.Recurse) that m's include and exclude globs
// select, sorted by path. A glob without "/" matches a file's name, one
// with "/" its path relative to dir. A symlink must resolve inside the
// repository; symlinked folders are not descended into.
func Manifests(repoRoot, dir string, m manifest.Manifests) ([]File, error) {
	dir = path.Clean(dir)
	abs, err := manifest.ConfinedPath(repoRoot, dir)
	if err != nil {
		return nil, problem(dir, "manifests folder: %v", err)
	}
	var files []File
	total := 0
	err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(abs, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel != "." && !m.Recurse {
				return filepath.SkipDir
			}
			return nil
		}
		ext := strings.ToLower(path.Ext(rel))
		if ext != ".yaml" && ext != ".yml" && ext != ".json" {
			return nil
		}
		if !selected(rel, m.Include, true) || selected(rel, m.Exclude, false) {
			return nil
		}
		repoPath := path.Join(dir, rel)
		real, err := manifest.ConfinedPath(repoRoot, repoPath)
		if err != nil {
			return problem(repoPath, "%v", trimRel(err, repoPath))
		}
		fi, err := os.Stat(real)
		if err != nil {
			return problem(repoPath, "%v", unwrapPathError(err))
		}
		if fi.IsDir() {
			return nil // a symlinked folder
		}
		if !fi.Mode().IsRegular() {
			return problem(repoPath, "not a regular file")
		}
		if fi.Size() > maxFileSize {
			return problem(repoPath, "larger than %d bytes", maxFileSize)
		}
		if len(files) == maxManifestFiles {
			return problem(dir, "more than %d manifest files", maxManifestFiles)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			return problem(repoPath, "%v", unwrapPathError(err))
		}
		total += len(data)
		if total > maxTotalSize {
			return problem(dir, "the manifests are larger than %d bytes", maxTotalSize)
		}
		files = append(files, File{Path: repoPath, Data: data})
		return nil
	})
	if err != nil {
		if _, ok := err.(*manifest.Error); ok {
			return nil, err
		}
		return nil, problem(dir, "%v", unwrapPathError(err))
	}
	if len(files) == 0 {
		return nil, problem(dir, "the manifests folder holds no *.yaml, *.yml or *.json file that the include and exclude patterns select")
	}
	return files, nil
}

// selected reports whether rel matches one of globs (empty: def).
func selected(rel string, globs []string, def bool) bool {
	if len(globs) == 0 {
		return def
	}
	for _, g := range globs {
		name := rel
		if !strings.Contains(g, "/") {
			name = path.Base(rel)
		}
		if ok, _ := path.Match(g, name); ok {
			return true
		}
	}
	return false
}

func problem(file, format string, args ...any) error {
	return &manifest.Error{Problems: []manifest.Problem{{File: file, Message: fmt.Sprintf(format, args...)}}}
}

func trimRel(err error, rel string) string {
	return strings.TrimPrefix(err.Error(), rel+": ")
}
