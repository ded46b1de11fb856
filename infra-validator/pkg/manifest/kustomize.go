package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// KustomizationFiles are the names Kustomize looks for in a folder, in its
// order.
var KustomizationFiles = []string{"kustomization.yaml", "kustomization.yml", "Kustomization"}

// maxKustomizationSize bounds one kustomization file or plugin config read
// by the walk.
const maxKustomizationSize = 1 << 20

// maxKustomizations bounds how many kustomization folders one overlay may
// reach, so a hostile repository cannot make the walk (or the build) huge.
const maxKustomizations = 1000

// kustomizationFile returns the repo-relative kustomization file of the
// repo-relative folder dir.
func kustomizationFile(repoRoot, dir string) (string, error) {
	for _, name := range KustomizationFiles {
		rel := path.Join(dir, name)
		abs, err := ConfinedPath(repoRoot, rel)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(abs); err != nil || !fi.Mode().IsRegular() {
			return "", fmt.Errorf("%s is not a regular file", rel)
		}
		return rel, nil
	}
	return "", fmt.Errorf("%s holds no kustomization.yaml", dir)
}

// KustomizeInputs walks the Kustomize overlay in the repo-relative folder
// dir as Kustomize will build it, and returns what the build reads: every
// kustomization folder it reaches (the overlay, its bases and components)
// and every file they name outside those folders, sorted and without
// covered paths. It is also the build's guard: it refuses, as an *Error
// naming the kustomization file and line, a path that is absolute, leaves
// the repository (with "..", or through a symlink) or does not exist, a
// remote base (git or http URL) not pinned to a commit or not fetched into
// RemoteBasesDir (remote.go; a fetched one is walked, confined to its own
// tree), a helmCharts entry that is incomplete, names values files out of
// the repository or whose chart is not fetched into KustomizeChartsDir
// (helmcharts.go), helmGlobals, HelmChartInflationGenerator, and exec or
// container KRM functions in generators, transformers and validators. With an error it
// still returns what it could walk.
func KustomizeInputs(repoRoot, dir string) ([]string, error) {
	dir, err := cleanDir(dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize folder: %w", err)
	}
	w := &kwalk{repoRoot: repoRoot, seen: map[string]bool{}}
	w.visit(dir, Problem{File: dir})
	if len(w.problems) > 0 {
		return coverSorted(w.inputs), &Error{Problems: w.problems}
	}
	return coverSorted(w.inputs), nil
}

type kwalk struct {
	repoRoot string
	seen     map[string]bool
	inputs   []string
	problems []Problem
	remotes  []RemoteBaseRef
	charts   []HelmChartRef
}

func (w *kwalk) fail(at Problem, format string, args ...any) {
	at.Message = fmt.Sprintf(format, args...)
	w.problems = append(w.problems, at)
}

// visit checks the kustomization in folder dir; at locates the reference
// to it for errors.
func (w *kwalk) visit(dir string, at Problem) {
	if w.seen[dir] {
		return
	}
	w.seen[dir] = true
	if len(w.seen) > maxKustomizations {
		w.fail(at, "more than %d kustomization folders", maxKustomizations)
		return
	}
	file, err := kustomizationFile(w.repoRoot, dir)
	if err != nil {
		w.fail(at, "%v", err)
		return
	}
	w.inputs = append(w.inputs, dir)
	data, err := w.read(file)
	if err != nil {
		w.fail(at, "%v", err)
		return
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		p := lineProblem(file, err.Error())
		w.problems = append(w.problems, p)
		return
	}
	if len(root.Content) == 0 {
		return // an empty kustomization builds nothing
	}
	m := root.Content[0]
	if m.Kind != yaml.MappingNode {
		w.fail(Problem{File: file, Line: m.Line}, "a kustomization must be a YAML mapping")
		return
	}
	here := func(n *yaml.Node) Problem { return Problem{File: file, Line: n.Line} }
	for i := 0; i+1 < len(m.Content); i += 2 {
		key, val := m.Content[i], m.Content[i+1]
		switch key.Value {
		case "resources", "bases", "components":
			for _, e := range w.strings(file, key.Value, val) {
				w.ref(dir, e, here(e), true, key.Value == "resources")
			}
		case "crds", "configurations":
			for _, e := range w.strings(file, key.Value, val) {
				w.ref(dir, e, here(e), false, true)
			}
		case "patchesStrategicMerge":
			for _, e := range w.strings(file, key.Value, val) {
				if !inline(e.Value) {
					w.ref(dir, e, here(e), false, true)
				}
			}
		case "generators", "transformers", "validators":
			for _, e := range w.strings(file, key.Value, val) {
				if inline(e.Value) {
					w.plugin([]byte(e.Value), here(e))
					continue
				}
				if target, ok := w.ref(dir, e, here(e), false, true); ok {
					if data, err := w.read(target); err == nil {
						w.plugin(data, here(e))
					}
				}
			}
		case "patches", "patchesJson6902", "replacements":
			for _, item := range w.items(file, key.Value, val) {
				if p := field(item, "path"); p != nil {
					w.ref(dir, p, here(p), false, true)
				}
			}
		case "configMapGenerator", "secretGenerator":
			for _, item := range w.items(file, key.Value, val) {
				for _, k := range []string{"files", "envs"} {
					if f := field(item, k); f != nil {
						for _, e := range w.strings(file, key.Value+"."+k, f) {
							v := *e
							if _, after, ok := strings.Cut(v.Value, "="); ok {
								v.Value = after
							}
							w.ref(dir, &v, here(e), false, true)
						}
					}
				}
				if f := field(item, "env"); f != nil && f.Kind == yaml.ScalarNode && f.Value != "" {
					w.ref(dir, f, here(f), false, true)
				}
			}
		case "openapi":
			if p := field(val, "path"); p != nil {
				w.ref(dir, p, here(p), false, true)
			}
		case "helmCharts":
			for _, item := range w.items(file, key.Value, val) {
				w.helmChart(dir, file, item, true)
			}
		case "helmGlobals":
			w.fail(here(key), "helmGlobals is refused: Sluice fetches helmCharts by digest into the content, so there is no chartHome or configHome to set")
		case "helmChartInflationGenerator":
			w.fail(here(key), "%s is refused: name the chart in helmCharts (with repo and version)", key.Value)
		}
	}
}

// read reads a repo-relative file confined to the repository.
func (w *kwalk) read(rel string) ([]byte, error) {
	data, err := readConfined(w.repoRoot, rel, maxKustomizationSize)
	if err != nil {
		return nil, err
	}
	if len(data) > maxKustomizationSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", rel, maxKustomizationSize)
	}
	return data, nil
}

// strings returns the string items of a sequence (or a lone string).
func (w *kwalk) strings(file, key string, n *yaml.Node) []*yaml.Node {
	switch n.Kind {
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return nil
		}
		return []*yaml.Node{n}
	case yaml.SequenceNode:
		var out []*yaml.Node
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				w.fail(Problem{File: file, Line: c.Line}, "%s: each entry must be a string", key)
				continue
			}
			out = append(out, c)
		}
		return out
	}
	w.fail(Problem{File: file, Line: n.Line}, "%s must be a list of strings", key)
	return nil
}

// items returns the mapping items of a sequence.
func (w *kwalk) items(file, key string, n *yaml.Node) []*yaml.Node {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		w.fail(Problem{File: file, Line: n.Line}, "%s must be a list", key)
		return nil
	}
	var out []*yaml.Node
	for _, c := range n.Content {
		if c.Kind == yaml.MappingNode {
			out = append(out, c)
		} else if c.Kind == yaml.ScalarNode && key == "patches" {
			// The old form: a patch file name.
			out = append(out, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "path"}, c}})
		}
	}
	return out
}

// field returns the value of key in mapping n.
func field(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func inline(s string) bool { return strings.Contains(s, "\n") }

// looksRemote says whether a kustomization entry names something Kustomize
// would fetch (a git repository or an http URL) rather than a local path.
func looksRemote(s string) bool {
	if strings.Contains(s, "://") || strings.Contains(s, "?ref=") || strings.Contains(s, "?version=") {
		return true
	}
	for _, p := range []string{"git@", "git::", "gh:", "github.com/", "gitlab.com/", "bitbucket.org/", "ssh:", "https:", "http:", "file:"} {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// ref checks one path entry of the kustomization in dir and records it:
// a folder is visited as a kustomization (when dirOK), a file is an input
// (when fileOK). It returns the repo-relative target when it is a file.
func (w *kwalk) ref(dir string, e *yaml.Node, at Problem, dirOK, fileOK bool) (string, bool) {
	s := e.Value
	switch {
	case s == "":
		w.fail(at, "empty path")
		return "", false
	case looksRemote(s):
		w.remote(dir, s, at, dirOK)
		return "", false
	case strings.HasPrefix(s, "/") || (len(s) >= 2 && s[1] == ':'):
		w.fail(at, "absolute path %q is refused: paths stay inside the repository", s)
		return "", false
	case strings.ContainsAny(s, "\\\x00"):
		w.fail(at, "path %q must use forward slashes and no NUL", s)
		return "", false
	}
	target := path.Clean(path.Join(dir, s))
	if target == ".." || strings.HasPrefix(target, "../") {
		w.fail(at, "path %q: %v", s, ErrOutsideRepo)
		return "", false
	}
	// A fetched remote base stays inside its own tree, and the
	// repository's own files never name a fetched tree directly.
	if r := remoteRoot(dir); r != remoteRoot(target) {
		if r != "" {
			w.fail(at, "path %q leaves its remote base", s)
		} else {
			w.fail(at, "path %q: %s is where Sluice keeps fetched remote bases; name the remote base by its URL", s, RemoteBasesDir)
		}
		return "", false
	}
	abs, err := ConfinedPath(w.repoRoot, target)
	switch {
	case errors.Is(err, ErrOutsideRepo):
		w.fail(at, "path %q: %v (a symlink points outside)", s, ErrOutsideRepo)
		return "", false
	case errors.Is(err, fs.ErrNotExist):
		w.fail(at, "path %q (%s) does not exist in the repository", s, target)
		return "", false
	case err != nil:
		w.fail(at, "path %q: %v", s, err)
		return "", false
	}
	fi, err := os.Stat(abs)
	if err != nil {
		w.fail(at, "path %q: %v", s, unwrapPathError(err))
		return "", false
	}
	switch {
	case fi.IsDir() && dirOK:
		w.visit(target, at)
		return "", false
	case fi.IsDir():
		w.fail(at, "path %q is a folder, a file is expected", s)
	case !fi.Mode().IsRegular():
		w.fail(at, "path %q is not a regular file", s)
	case !fileOK:
		w.fail(at, "path %q is a file, a folder holding a kustomization is expected", s)
	default:
		w.inputs = append(w.inputs, target)
		return target, true
	}
	return "", false
}

// remote checks a remote base entry s of the kustomization in dir: it
// must be a base (dirOK), pinned to a commit (ParseRemoteBase), not named
// by a remote base itself, and fetched into the content (the syncer
// fetches only those the Repository allows); the fetched folder is then
// walked like any base.
func (w *kwalk) remote(dir, s string, at Problem, dirOK bool) {
	if !dirOK {
		w.fail(at, "remote %q is refused: only resources, bases and components may name a remote base", s)
		return
	}
	if remoteRoot(dir) != "" {
		w.fail(at, "remote base %q is refused: a remote base's own remote bases are not fetched", s)
		return
	}
	rb, err := ParseRemoteBase(s)
	if err != nil {
		w.fail(at, "remote base %q is refused: %v", s, err)
		return
	}
	w.remotes = append(w.remotes, RemoteBaseRef{RemoteBase: rb, At: at})
	if _, err := ConfinedPath(w.repoRoot, rb.Root()); err != nil {
		w.fail(at, "remote base %q is refused: it is not fetched (the Repository does not allow remote bases from %s: spec.kustomizeRemoteBases)", s, rb.Repo)
		return
	}
	w.visit(rb.Target(), at)
}

// remoteRoot is the fetched remote base tree p lies in, or "".
func remoteRoot(p string) string {
	rest, ok := strings.CutPrefix(p, RemoteBasesDir+"/")
	if !ok {
		return ""
	}
	key, _, _ := strings.Cut(rest, "/")
	return RemoteBasesDir + "/" + key
}

// KustomizeRemoteBases lists the remote bases the overlay in dir names
// (with where), walking what it can: what the syncer must fetch before
// the overlay builds. Nested remote bases are not listed (they are
// refused).
func KustomizeRemoteBases(repoRoot, dir string) []RemoteBaseRef {
	dir, err := cleanDir(dir)
	if err != nil {
		return nil
	}
	w := &kwalk{repoRoot: repoRoot, seen: map[string]bool{}}
	w.visit(dir, Problem{File: dir})
	return w.remotes
}

// plugin refuses a generator, transformer or validator config that runs
// something: an exec or container KRM function, or Helm chart inflation
// outside helmCharts.
func (w *kwalk) plugin(data []byte, at Problem) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			return // kustomize reports YAML errors itself
		}
		kind, _ := doc["kind"].(string)
		if kind == "HelmChartInflationGenerator" {
			w.fail(at, "HelmChartInflationGenerator is refused: name the chart in the kustomization's helmCharts (with repo and version)")
		}
		meta, _ := doc["metadata"].(map[string]any)
		ann, _ := meta["annotations"].(map[string]any)
		for _, k := range []string{"config.kubernetes.io/function", "config.k8s.io/function"} {
			if _, ok := ann[k]; ok {
				w.fail(at, "plugin %s runs a KRM function (%s): exec and container plugins are off", kind, k)
			}
		}
		if _, ok := doc["exec"]; ok {
			w.fail(at, "plugin %s runs a program: exec plugins are off", kind)
		}
	}
}
