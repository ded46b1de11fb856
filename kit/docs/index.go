// Package docs keeps the repository's hand-written maps true to the code:
// its tests fail when a module README leaves out a package, names a Go
// identifier or a file that does not exist, when the root README does not
// link a module README, or when a package's "Exported API" comment and the
// package disagree. The index it builds is of source text only (go/parser),
// so it needs no build of the modules it reads.
package docs

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
)

// Package is what one Go package declares.
type Package struct {
	// Name is the package clause's name.
	Name string
	// Decls are its top-level names: functions, types, constants and
	// variables.
	Decls map[string]bool
	// Members are the methods and struct fields of each of its types.
	Members map[string]map[string]bool
	// Exported lists the exported top-level names and the exported methods
	// of exported types ("Type.Method"), as godoc shows them.
	Exported map[string]bool
}

// Index is the Go source of a folder tree (a module), package by package.
type Index struct {
	// Root is the folder indexed.
	Root string
	// Packages are keyed by folder, relative to Root ("." for Root).
	Packages map[string]*Package
	// Names holds every name declared anywhere: packages, top-level
	// names, methods, struct fields and the JSON names of fields.
	Names map[string]bool
}

// NewIndex parses the non-test Go files below root, leaving out testdata,
// hidden folders and the folders of nested modules (their own go.mod)
// unless they are listed in also (relative to root).
func NewIndex(root string, also ...string) (*Index, error) {
	ix := &Index{Root: root, Packages: map[string]*Package{}, Names: map[string]bool{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if rel != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || isNestedModule(path, rel, also)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ix.add(filepath.ToSlash(filepath.Dir(rel)), f)
		return nil
	})
	return ix, err
}

// isNestedModule reports whether the folder path holds a go.mod of its
// own and is not listed in also.
func isNestedModule(path, rel string, also []string) bool {
	if _, err := os.Stat(filepath.Join(path, "go.mod")); err != nil {
		return false
	}
	for _, a := range also {
		if filepath.Clean(a) == rel {
			return false
		}
	}
	return true
}

// add records the declarations of file f of the package in folder dir.
func (ix *Index) add(dir string, f *ast.File) {
	p := ix.Packages[dir]
	if p == nil {
		p = &Package{Name: f.Name.Name, Decls: map[string]bool{}, Members: map[string]map[string]bool{}, Exported: map[string]bool{}}
		ix.Packages[dir] = p
	}
	ix.Names[p.Name] = true
	for _, decl := range f.Decls {
		switch d := decl.(type) {
		case *ast.FuncDecl:
			ix.addFunc(p, d)
		case *ast.GenDecl:
			for _, spec := range d.Specs {
				ix.addSpec(p, spec)
			}
		}
	}
}

// addFunc records a function or a method.
func (ix *Index) addFunc(p *Package, d *ast.FuncDecl) {
	name := d.Name.Name
	ix.Names[name] = true
	if d.Recv == nil || len(d.Recv.List) == 0 {
		p.Decls[name] = true
		if ast.IsExported(name) {
			p.Exported[name] = true
		}
		return
	}
	recv := receiverType(d.Recv.List[0].Type)
	p.member(recv, name)
	if ast.IsExported(recv) && ast.IsExported(name) {
		p.Exported[recv+"."+name] = true
	}
}

// addSpec records a type (and its fields), constants or variables.
func (ix *Index) addSpec(p *Package, spec ast.Spec) {
	switch s := spec.(type) {
	case *ast.TypeSpec:
		name := s.Name.Name
		ix.Names[name] = true
		p.Decls[name] = true
		if ast.IsExported(name) {
			p.Exported[name] = true
		}
		if st, ok := s.Type.(*ast.StructType); ok {
			for _, fld := range st.Fields.List {
				for _, n := range fld.Names {
					ix.Names[n.Name] = true
					p.member(name, n.Name)
				}
				if fld.Tag != nil {
					ix.addJSONName(fld.Tag.Value)
				}
			}
		}
		if it, ok := s.Type.(*ast.InterfaceType); ok {
			for _, m := range it.Methods.List {
				for _, n := range m.Names {
					ix.Names[n.Name] = true
					p.member(name, n.Name)
				}
			}
		}
	case *ast.ValueSpec:
		for _, n := range s.Names {
			ix.Names[n.Name] = true
			p.Decls[n.Name] = true
			if ast.IsExported(n.Name) {
				p.Exported[n.Name] = true
			}
		}
	}
}

// addJSONName records the JSON name of a struct tag: READMEs cite API
// fields as they are written in YAML (`observedGeneration`).
func (ix *Index) addJSONName(tag string) {
	t, err := strconv.Unquote(tag)
	if err != nil {
		return
	}
	if name, _, _ := strings.Cut(reflect.StructTag(t).Get("json"), ","); name != "" && name != "-" {
		ix.Names[name] = true
	}
}

// member records a method or field of type typ.
func (p *Package) member(typ, name string) {
	if p.Members[typ] == nil {
		p.Members[typ] = map[string]bool{}
	}
	p.Members[typ][name] = true
}

// receiverType is the type name of a method receiver: T, *T, T[K] or *T[K].
func receiverType(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
