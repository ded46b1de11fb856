package manifest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
)

// ErrOutsideRepo is wrapped by every error about a path that leaves the
// repository, directly or through a symlink.
var ErrOutsideRepo = errors.New("path leaves the repository")

// cleanDir normalises a repo-relative folder; "" and "." mean the root.
func cleanDir(dir string) (string, error) {
	if dir == "" || dir == "." {
		return ".", nil
	}
	if err := checkRelPath(strings.TrimSuffix(dir, "/")); err != nil {
		return "", err
	}
	return path.Clean(dir), nil
}

// ConfinedPath resolves rel (slash-separated, relative to repoRoot) to an
// absolute path with every symlink evaluated, and fails with ErrOutsideRepo
// when the result is outside repoRoot. The path must exist; a missing path
// gives an error wrapping fs.ErrNotExist.
func ConfinedPath(repoRoot, rel string) (string, error) {
	rel, err := cleanDir(rel)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrOutsideRepo, err)
	}
	root, err := realRoot(repoRoot)
	if err != nil {
		return "", err
	}
	real, err := filepath.EvalSymlinks(filepath.Join(root, filepath.FromSlash(rel)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			// A missing path may still sit below a symlink leading out.
			if parent := path.Dir(rel); parent != rel && parent != "." {
				if _, perr := ConfinedPath(repoRoot, parent); errors.Is(perr, ErrOutsideRepo) {
					return "", fmt.Errorf("%s: %w (a symlink points outside)", rel, ErrOutsideRepo)
				}
			}
			return "", fmt.Errorf("%s: %w", rel, fs.ErrNotExist)
		}
		// The underlying error can name absolute paths of this machine;
		// keep only the repo-relative name.
		return "", fmt.Errorf("%s: cannot resolve: %w", rel, unwrapPathError(err))
	}
	if !within(root, real) {
		return "", fmt.Errorf("%s: %w (a symlink points outside)", rel, ErrOutsideRepo)
	}
	return real, nil
}

func unwrapPathError(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func realRoot(repoRoot string) (string, error) {
	abs, err := filepath.Abs(repoRoot)
	if err != nil {
		return "", fmt.Errorf("repository root: %w", err)
	}
	root, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return "", fmt.Errorf("repository root: %w", unwrapPathError(err))
	}
	return root, nil
}

// within reports whether p is root or below it; both must be clean and absolute.
func within(root, p string) bool {
	r, err := filepath.Rel(root, p)
	if err != nil {
		return false
	}
	return r == "." || (r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)))
}

// repoRel turns a resolved absolute path back into a slash-separated path
// relative to the (resolved) root.
func repoRel(root, p string) string {
	r, _ := filepath.Rel(root, p)
	return filepath.ToSlash(r)
}

// Load reads <serviceDir>/service.yaml from a checkout, parses it and checks
// its paths on disk (CheckPaths). serviceDir is relative to repoRoot; error
// messages name the manifest by its repo-relative path.
func Load(repoRoot, serviceDir string) (*Service, error) {
	dir, err := cleanDir(serviceDir)
	if err != nil {
		return nil, fmt.Errorf("service folder: %w", err)
	}
	file := path.Join(dir, FileName)
	data, err := readConfined(repoRoot, file, maxManifestSize)
	if err != nil {
		return nil, fmt.Errorf("service manifest: %w", err)
	}
	svc, err := Parse(data, file)
	if err != nil {
		return nil, err
	}
	svc.Dir = dir
	if err := svc.CheckPaths(repoRoot); err != nil {
		return nil, err
	}
	return svc, nil
}

// CheckPaths checks, in a checkout, that every values file exists and is a
// regular file, the chart folder holds a Chart.yaml and the Terraform folder
// exists, all of them inside repoRoot after resolving symlinks. Every error
// is an *Error naming the manifest line.
func (s *Service) CheckPaths(repoRoot string) error {
	var problems []Problem
	check := func(linePath, rel string, wantDir bool, what string) bool {
		p, err := ConfinedPath(repoRoot, rel)
		if err == nil {
			var fi os.FileInfo
			fi, err = os.Stat(p)
			switch {
			case err != nil:
				err = unwrapPathError(err)
			case wantDir && !fi.IsDir():
				err = errors.New("is not a folder")
			case !wantDir && !fi.Mode().IsRegular():
				err = errors.New("is not a regular file")
			}
		}
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				err = errors.New("does not exist")
			}
			problems = append(problems, Problem{File: s.File, Line: s.line(linePath),
				Message: fmt.Sprintf("%s %s: %v", what, rel, trimRel(err, rel))})
			return false
		}
		return true
	}
	for i, v := range s.Values {
		check(fmt.Sprintf("values[%d]", i), s.join(v), false, "values file")
	}
	for i, e := range s.Environments {
		for j, v := range e.Values {
			check(fmt.Sprintf("environments[%d].values[%d]", i, j), s.join(v), false, "values file")
		}
	}
	if d := s.ChartDir(); d != "" {
		if check("chart.path", d, true, "chart folder") {
			check("chart.path", path.Join(d, "Chart.yaml"), false, "chart file")
		}
	}
	for i, e := range s.Environments {
		if d := s.ChartDirOf(e.Name); e.Chart != nil && d != "" && d != s.ChartDir() {
			at := fmt.Sprintf("environments[%d].chart.path", i)
			if check(at, d, true, "chart folder") {
				check(at, path.Join(d, "Chart.yaml"), false, "chart file")
			}
		}
	}
	if d := s.TerraformDir(); d != "" {
		check("terraform.dir", d, true, "terraform folder")
	}
	for i, e := range s.Environments {
		p := fmt.Sprintf("environments[%d]", i)
		if d := s.KustomizeDir(e.Name); d != "" && check(p+".kustomize.path", d, true, "kustomize folder") {
			if _, err := kustomizationFile(repoRoot, d); err != nil {
				problems = append(problems, Problem{File: s.File, Line: s.line(p + ".kustomize.path"),
					Message: fmt.Sprintf("kustomize folder %s: %v", d, trimRel(err, d))})
			}
		}
		if d := s.ManifestsDir(e.Name); d != "" {
			check(p+".manifests.path", d, true, "manifests folder")
		}
	}
	if len(problems) > 0 {
		return &Error{Problems: problems}
	}
	return nil
}

// trimRel drops a leading "<rel>: " from err's text, which ConfinedPath adds.
func trimRel(err error, rel string) string {
	return strings.TrimPrefix(err.Error(), rel+": ")
}

// Inputs lists the repo-relative paths a service depends on, for change
// detection and for the artifact: the service folder, the chart folder when
// it is in the repository, the Terraform folder and every local module it
// uses (recursively), and the targets of symlinks found in them (which must
// stay inside the repository). The list is sorted, without duplicates and
// without paths already covered by a listed folder; "." stands for the whole
// repository. An environment's Kustomize overlay adds what its build reads
// (KustomizeInputs), bases outside the service folder included.
func (s *Service) Inputs(repoRoot string) ([]string, error) {
	root, err := realRoot(repoRoot)
	if err != nil {
		return nil, err
	}
	dir, err := cleanDir(s.Dir)
	if err != nil {
		return nil, err
	}
	queue := []string{dir}
	if d := s.ChartDir(); d != "" {
		queue = append(queue, d)
	}
	for _, e := range s.Environments {
		if d := s.ChartDirOf(e.Name); e.Chart != nil && d != "" {
			queue = append(queue, d)
		}
	}
	if d := s.TerraformDir(); d != "" {
		mods, err := TerraformModules(repoRoot, d)
		if err != nil {
			return nil, err
		}
		queue = append(queue, d)
		queue = append(queue, mods...)
	}
	for _, e := range s.Environments {
		if d := s.KustomizeDir(e.Name); d != "" {
			// A walk that fails still lists what it reached; the build
			// reports the problem, with file and line, for that
			// environment alone.
			in, _ := KustomizeInputs(repoRoot, d)
			queue = append(queue, d)
			queue = append(queue, in...)
		}
	}

	seen := map[string]bool{}
	for len(queue) > 0 {
		rel := queue[0]
		queue = queue[1:]
		if seen[rel] {
			continue
		}
		seen[rel] = true
		abs, err := ConfinedPath(repoRoot, rel)
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", s.Name, err)
		}
		// Walk the real folder; a symlink inside must resolve inside the
		// repository, and its target becomes an input too.
		err = filepath.WalkDir(abs, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return fmt.Errorf("%s: %w", repoRel(root, p), unwrapPathError(err))
			}
			if d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			linkRel := repoRel(root, p)
			target, err := filepath.EvalSymlinks(p)
			if err != nil {
				return fmt.Errorf("symlink %s: %w", linkRel, unwrapPathError(err))
			}
			if !within(root, target) {
				return fmt.Errorf("symlink %s: %w", linkRel, ErrOutsideRepo)
			}
			queue = append(queue, repoRel(root, target))
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("service %s: %w", s.Name, err)
		}
	}

	all := make([]string, 0, len(seen))
	for p := range seen {
		all = append(all, p)
	}
	return coverSorted(all), nil
}

// coverSorted sorts paths and drops those inside another listed folder.
func coverSorted(paths []string) []string {
	sort.Strings(paths)
	var out []string
	for _, p := range paths {
		covered := false
		for _, q := range out {
			if q == "." || p == q || strings.HasPrefix(p, q+"/") {
				covered = true
				break
			}
		}
		if !covered {
			out = append(out, p)
		}
	}
	// A later "." (sorts after names starting with '-' etc.) covers all.
	for _, p := range out {
		if p == "." {
			return []string{"."}
		}
	}
	return out
}

var moduleSchema = &hcl.BodySchema{
	Blocks: []hcl.BlockHeaderSchema{{Type: "module", LabelNames: []string{"name"}}},
}

var moduleBodySchema = &hcl.BodySchema{
	Attributes: []hcl.AttributeSchema{{Name: "source"}},
}

// TerraformModules returns the repo-relative folders of the local modules
// (sources starting with "./" or "../") that the stack in dir uses, followed
// recursively, sorted and without dir itself. A local module outside the
// repository, a missing module folder or a source that is not a literal
// string is an error naming the file and line. Registry and remote sources
// are ignored: they are not part of the repository.
func TerraformModules(repoRoot, dir string) ([]string, error) {
	dir, err := cleanDir(dir)
	if err != nil {
		return nil, fmt.Errorf("terraform folder: %w", err)
	}
	found := map[string]bool{}
	if err := collectModules(repoRoot, dir, found, map[string]bool{dir: true}); err != nil {
		return nil, err
	}
	delete(found, dir)
	out := make([]string, 0, len(found))
	for p := range found {
		out = append(out, p)
	}
	sort.Strings(out)
	return out, nil
}

func collectModules(repoRoot, dir string, found, visiting map[string]bool) error {
	abs, err := ConfinedPath(repoRoot, dir)
	if err != nil {
		return fmt.Errorf("terraform module: %w", err)
	}
	entries, err := os.ReadDir(abs)
	if err != nil {
		return fmt.Errorf("terraform module %s: %w", dir, unwrapPathError(err))
	}
	parser := hclparse.NewParser()
	for _, e := range entries {
		name := e.Name()
		isJSON := strings.HasSuffix(name, ".tf.json")
		if e.IsDir() || (!strings.HasSuffix(name, ".tf") && !isJSON) {
			continue
		}
		rel := path.Join(dir, name)
		fileAbs, err := ConfinedPath(repoRoot, rel)
		if err != nil {
			return fmt.Errorf("terraform file: %w", err)
		}
		src, err := os.ReadFile(fileAbs)
		if err != nil {
			return fmt.Errorf("terraform file %s: %w", rel, unwrapPathError(err))
		}
		var f *hcl.File
		var diags hcl.Diagnostics
		if isJSON {
			f, diags = parser.ParseJSON(src, rel)
		} else {
			f, diags = parser.ParseHCL(src, rel)
		}
		if diags.HasErrors() {
			return fmt.Errorf("terraform file: %s", diagString(diags))
		}
		content, _, diags := f.Body.PartialContent(moduleSchema)
		if diags.HasErrors() {
			return fmt.Errorf("terraform file: %s", diagString(diags))
		}
		for _, b := range content.Blocks {
			mc, _, diags := b.Body.PartialContent(moduleBodySchema)
			if diags.HasErrors() {
				return fmt.Errorf("terraform module %q: %s", b.Labels[0], diagString(diags))
			}
			attr, ok := mc.Attributes["source"]
			if !ok {
				return fmt.Errorf("%s:%d: module %q has no source", rel, b.DefRange.Start.Line, b.Labels[0])
			}
			val, diags := attr.Expr.Value(nil)
			if diags.HasErrors() || !val.IsKnown() || val.IsNull() || val.Type() != cty.String {
				return fmt.Errorf("%s:%d: module %q: source must be a literal string", rel, attr.Range.Start.Line, b.Labels[0])
			}
			source := val.AsString()
			if !strings.HasPrefix(source, "./") && !strings.HasPrefix(source, "../") {
				continue // registry, git, http… sources are not in the repository
			}
			target := path.Clean(path.Join(dir, source))
			if target == ".." || strings.HasPrefix(target, "../") {
				return fmt.Errorf("%s:%d: module %q: source %q: %w", rel, attr.Range.Start.Line, b.Labels[0], source, ErrOutsideRepo)
			}
			tabs, err := ConfinedPath(repoRoot, target)
			if err != nil {
				return fmt.Errorf("%s:%d: module %q: %w", rel, attr.Range.Start.Line, b.Labels[0], err)
			}
			if fi, err := os.Stat(tabs); err != nil || !fi.IsDir() {
				return fmt.Errorf("%s:%d: module %q: source %q is not a folder", rel, attr.Range.Start.Line, b.Labels[0], source)
			}
			// Record the real location so a symlinked module is listed once.
			root, err := realRoot(repoRoot)
			if err != nil {
				return err
			}
			target = repoRel(root, tabs)
			if found[target] || visiting[target] {
				continue
			}
			found[target] = true
			visiting[target] = true
			if err := collectModules(repoRoot, target, found, visiting); err != nil {
				return err
			}
		}
	}
	return nil
}

func diagString(diags hcl.Diagnostics) string {
	var parts []string
	for _, d := range diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		loc := ""
		if d.Subject != nil {
			loc = fmt.Sprintf("%s:%d: ", d.Subject.Filename, d.Subject.Start.Line)
		}
		parts = append(parts, loc+d.Summary+detail(d.Detail))
	}
	return strings.Join(parts, "; ")
}

func detail(s string) string {
	if s == "" {
		return ""
	}
	return ": " + s
}

// readConfined reads the repo-relative file rel, confined to repoRoot (no
// path or symlink out of it), and at most limit+1 bytes of it: the caller
// says what more than limit means.
func readConfined(repoRoot, rel string, limit int) ([]byte, error) {
	abs, err := ConfinedPath(repoRoot, rel)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, unwrapPathError(err))
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, unwrapPathError(err))
	}
	return data, nil
}
