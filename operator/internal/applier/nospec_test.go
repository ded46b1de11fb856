package applier_test

// The appliers must act only on the approved ChangeRequest and the
// Release's applied status (DESIGN.md §9.8): a Release's spec is what the
// latest push wrote, approved or not. applier.Request carries no Release
// spec, so the compiler proves most of it; this test proves the rest, for
// every package under operator/internal/applier, with the type checker:
// no code reads the Spec field of a Release (or calls a Release method that
// reads it), however it got hold of one (the Argo CD plugin reads Releases
// from the API server).

import (
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// apiPath is the API package whose Release spec nothing here may read.
const apiPath = "github.com/sluice-gitops/sluice/operator/api/v1alpha1"

// listed is what `go list -json` says of a package.
type listed struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	Export     string
	DepOnly    bool
	Error      *struct{ Err string }
}

// loadExports lists the packages of pattern and their dependencies with
// their export data (building them, through the shared build cache).
func loadExports(t *testing.T, pattern string) (roots []listed, exports map[string]string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-export", "-deps", "-json=ImportPath,Dir,GoFiles,Export,DepOnly,Error", pattern)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list %s", pattern)
	exports = map[string]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else {
			require.NoError(t, err)
		}
		require.Nil(t, p.Error, "go list %s: %s", p.ImportPath, p.Error)
		exports[p.ImportPath] = p.Export
		if !p.DepOnly {
			roots = append(roots, p)
		}
	}
	return roots, exports
}

// newImporter imports packages from their export data.
func newImporter(fset *token.FileSet, exports map[string]string) types.Importer {
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
}

// forbidden are the objects whose use reads a Release's spec: the Spec
// field of Release, and Release's methods that read it.
func forbidden(t *testing.T, imp types.Importer) map[types.Object]string {
	t.Helper()
	api, err := imp.Import(apiPath)
	require.NoError(t, err)
	rel, ok := api.Scope().Lookup("Release").(*types.TypeName)
	require.True(t, ok, "the API has a Release type")
	out := map[types.Object]string{}
	spec, _, _ := types.LookupFieldOrMethod(rel.Type(), true, api, "Spec")
	require.NotNil(t, spec, "Release has a Spec field")
	out[spec] = "the Spec field of a Release"
	// Methods declared on Release in the API package read its spec
	// (DeepCopy copies it, and acts on nothing).
	mset := types.NewMethodSet(types.NewPointer(rel.Type()))
	for i := range mset.Len() {
		m := mset.At(i).Obj()
		if m.Pkg() != nil && m.Pkg().Path() == apiPath && !strings.HasPrefix(m.Name(), "DeepCopy") {
			out[m] = "Release." + m.Name() + ", which reads its spec"
		}
	}
	return out
}

// specReads type-checks files as package path and returns each use of a
// forbidden object, as "file:line: what".
func specReads(fset *token.FileSet, path string, files []*ast.File, imp types.Importer, bad map[types.Object]string) ([]string, error) {
	info := &types.Info{Selections: map[*ast.SelectorExpr]*types.Selection{}, Uses: map[*ast.Ident]types.Object{}}
	conf := types.Config{Importer: imp, Error: func(error) {}}
	if _, err := conf.Check(path, fset, files, info); err != nil {
		return nil, fmt.Errorf("type-check %s: %w", path, err)
	}
	var out []string
	for sel, s := range info.Selections {
		if what, ok := bad[s.Obj()]; ok {
			out = append(out, fmt.Sprintf("%s: reads %s", fset.Position(sel.Sel.Pos()), what))
		}
	}
	return out, nil
}

func TestApplierPackages_readNothingFromAReleasesSpec(t *testing.T) {
	roots, exports := loadExports(t, "github.com/sluice-gitops/sluice/operator/internal/applier/...")
	fset := token.NewFileSet()
	imp := newImporter(fset, exports)
	bad := forbidden(t, imp)
	files := 0
	var found []string
	for _, p := range roots {
		var parsed []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			parsed = append(parsed, f)
		}
		files += len(parsed)
		reads, err := specReads(fset, p.ImportPath, parsed, imp, bad)
		require.NoError(t, err)
		found = append(found, reads...)
	}
	require.GreaterOrEqual(t, len(roots), 4, "the applier packages were found")
	require.Greater(t, files, 10, "their files were read")
	require.Empty(t, found, "operator/internal/applier reads nothing from a Release's spec (act on the approved ChangeRequest: SourceOf, StackOf, NamespaceOf, DeliveryOf)")
}

// TestSpecReads_findsAPlantedRead checks the check: planted reads of a
// Release's spec, direct or through an embedding type or a method, are
// found; reading its name and status is not.
func TestSpecReads_findsAPlantedRead(t *testing.T) {
	_, exports := loadExports(t, apiPath)
	fset := token.NewFileSet()
	imp := newImporter(fset, exports)
	bad := forbidden(t, imp)
	check := func(body string) []string {
		src := "package plant\nimport sluicev1 \"" + apiPath + "\"\n" + body
		f, err := parser.ParseFile(fset, "plant.go", src, 0)
		require.NoError(t, err)
		reads, err := specReads(fset, "example.com/plant", []*ast.File{f}, imp, bad)
		require.NoError(t, err)
		return reads
	}
	require.Len(t, check(`func f(r *sluicev1.Release) string { return string(r.Spec.SourcePath) }`), 1)
	require.Len(t, check(`type wrap struct{ *sluicev1.Release }
func f(w wrap) string { return w.Spec.TargetNamespace }`), 1)
	require.Len(t, check(`func f(r sluicev1.Release) sluicev1.Delivery { return r.Delivery() }`), 1)
	require.Empty(t, check(`func f(r *sluicev1.Release) string { return r.Name + r.Status.AppliedTargetNamespace }`))
}
