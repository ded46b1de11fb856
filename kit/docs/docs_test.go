package docs

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

// repo is the repository root, seen from this package's folder.
const repo = "../.."

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func index(t *testing.T, module string, also ...string) *Index {
	t.Helper()
	ix, err := NewIndex(filepath.Join(repo, module), also...)
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

// section returns the text of the Markdown section headed "## title", up
// to the next heading of that level.
func section(t *testing.T, markdown, title string) string {
	t.Helper()
	_, rest, ok := strings.Cut(markdown, "\n## "+title+"\n")
	if !ok {
		t.Fatalf("no section %q", title)
	}
	body, _, _ := strings.Cut(rest, "\n## ")
	return body
}

// modules are the folders go.work uses.
func modules(t *testing.T) []string {
	t.Helper()
	_, block, ok := strings.Cut(read(t, "go.work"), "use (")
	if !ok {
		t.Fatal("go.work has no use block")
	}
	block, _, _ = strings.Cut(block, ")")
	var out []string
	for _, f := range strings.Fields(block) {
		out = append(out, path.Clean(f))
	}
	return out
}

func TestRootREADME_linksEveryModuleREADME(t *testing.T) {
	root := read(t, "README.md")
	checked := 0
	for _, m := range modules(t) {
		if _, err := os.Stat(filepath.Join(repo, m, "README.md")); err != nil {
			continue
		}
		checked++
		if !strings.Contains(root, "]("+m+"/README.md)") {
			t.Errorf("README.md does not link %s/README.md", m)
		}
	}
	if checked < 3 {
		t.Fatalf("found %d module READMEs, want the operator's, the syncer's and kit's at least", checked)
	}
}

func TestOperatorREADME_mapsEveryPackage(t *testing.T) {
	packages := section(t, read(t, "operator/README.md"), "Packages")
	ix := index(t, "operator")
	for dir := range ix.Packages {
		if dir == "." {
			continue // doc.go of the module
		}
		if !strings.Contains(packages, "`"+dir+"`") {
			t.Errorf("operator/README.md's Packages table leaves out `%s`", dir)
		}
	}
	// And the table names no package that is gone.
	for _, row := range regexp.MustCompile("(?m)^\\| `([^`]+)` \\|").FindAllStringSubmatch(packages, -1) {
		if ix.Packages[row[1]] == nil {
			t.Errorf("operator/README.md maps `%s`, which is no package of the operator", row[1])
		}
	}
}

func TestOperatorREADME_citesOnlyNamesAndFilesThatExist(t *testing.T) {
	c := &Checker{Index: index(t, "operator", "api"), Bases: []string{".", "internal"}, BareNames: true}
	checkSpans(t, "operator/README.md", c)
}

func TestSyncerREADME_citesOnlyNamesAndFilesThatExist(t *testing.T) {
	c := &Checker{Index: index(t, "gitops-syncer"), Bases: []string{".", "internal"}}
	checkSpans(t, "gitops-syncer/README.md", c)
}

func TestKitREADME_citesOnlyNamesAndFilesThatExist(t *testing.T) {
	c := &Checker{Index: index(t, "kit"), Bases: []string{"."}, BareNames: true}
	checkSpans(t, "kit/README.md", c)
}

func checkSpans(t *testing.T, readme string, c *Checker) {
	t.Helper()
	checked := 0
	for _, span := range CodeSpans(read(t, readme)) {
		if why := c.Check(span); why != "" {
			t.Errorf("%s cites `%s`: %s", readme, span, why)
		}
		checked++
	}
	if checked == 0 {
		t.Fatalf("%s cites nothing: is it the right file?", readme)
	}
}

// TestChecker_findsWhatIsMissingAndPassesProse: the checks the README tests
// rely on, on names that do and do not exist in the operator.
func TestChecker_findsWhatIsMissingAndPassesProse(t *testing.T) {
	c := &Checker{Index: index(t, "operator", "api"), Bases: []string{".", "internal"}, BareNames: true}
	for span, wantOK := range map[string]bool{
		"gate.Decide":                       true,
		"gate.NoSuchDecision":               false,
		"controller/lock.go":                true,
		"controller/no_such_file.go":        false,
		"gate/gateinput.Load":               true,
		"gate/gateinput.Fetch":              false,
		"ChangeRequestReconciler.Reconcile": true,
		"ChangeRequestReconciler.Apply":     false,
		"stepsFor":                          true,
		"runStepsTwice":                     false,
		"observedGeneration":                true,
		"spec.release":                      true,
		"Applied=False/WaitingForLock":      true,
		"make bench":                        true,
		"*applier.Failure":                  true,
		"applier.AsStalled":                 true,
	} {
		if why := c.Check(span); (why == "") != wantOK {
			t.Errorf("Check(%q) = %q, want ok=%v", span, why, wantOK)
		}
	}
}

// exportedAPI reads the "Exported API" list of a package comment: the
// names it declares, as "Name" or "Type.Method".
func exportedAPI(t *testing.T, file string) map[string]bool {
	t.Helper()
	_, list, ok := strings.Cut(read(t, file), "// Exported API")
	if !ok {
		t.Fatalf("%s has no Exported API comment", file)
	}
	list, _, _ = strings.Cut(list, "\npackage ")
	decl := regexp.MustCompile(`^//\t(?:func|type) (?:\(\*?(\w+)\) )?(\w+)`)
	consts := regexp.MustCompile(`^//\tconst (\w+(?:, \w+)*)`)
	out := map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		if m := decl.FindStringSubmatch(line); m != nil {
			name := m[2]
			if m[1] != "" {
				name = m[1] + "." + name
			}
			out[name] = true
		}
		if m := consts.FindStringSubmatch(line); m != nil {
			for _, name := range strings.Split(m[1], ", ") {
				out[name] = true
			}
		}
	}
	return out
}

func TestPolicyExportedAPI_listsExactlyWhatThePackageExports(t *testing.T) {
	listed := exportedAPI(t, "infra-validator/pkg/policy/engine.go")
	ix := index(t, "infra-validator/pkg/policy")
	exported := ix.Packages["."].Exported
	var missing, extra []string
	for name := range exported {
		if !listed[name] {
			missing = append(missing, name)
		}
	}
	for name := range listed {
		if !exported[name] {
			extra = append(extra, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing) > 0 || len(extra) > 0 {
		t.Fatalf("infra-validator/pkg/policy/engine.go's Exported API comment leaves out %v and lists %v, which the package does not export", missing, extra)
	}
}
