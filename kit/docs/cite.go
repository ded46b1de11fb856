package docs

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
)

// codeSpan matches a Markdown code span on one line.
var codeSpan = regexp.MustCompile("`([^`\n]+)`")

// CodeSpans returns the code spans of a Markdown text, in order.
func CodeSpans(markdown string) []string {
	var out []string
	for _, m := range codeSpan.FindAllStringSubmatch(markdown, -1) {
		out = append(out, m[1])
	}
	return out
}

var (
	goName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	camelCase = regexp.MustCompile(`^[a-z]+[A-Z][A-Za-z0-9]*$`)
	pathLike  = regexp.MustCompile(`^[a-z][a-z0-9_-]*(/[A-Za-z0-9_.-]+)+$`)
)

// Checker decides whether the code spans of a README name things that
// exist in a module.
type Checker struct {
	// Index is the module's source.
	Index *Index
	// Bases are the folders, relative to the module, that a path in the
	// README may be relative to ("." and "internal" for the operator).
	Bases []string
	// BareNames also checks lone camelCase names (`runSteps`), which
	// must be declared somewhere; off for READMEs that cite YAML keys.
	BareNames bool
}

// Check returns why span names nothing that exists, or "" when it does or
// when span is not a Go name or a path (prose, flags, YAML values).
func (c *Checker) Check(span string) string {
	s := strings.TrimSuffix(strings.TrimPrefix(span, "*"), "()")
	switch {
	case strings.ContainsAny(s, " =:<>{}[],\"'*@$"):
		return ""
	case pathLike.MatchString(s):
		return c.checkPath(s)
	case strings.Count(s, ".") == 1 && !strings.Contains(s, "/"):
		left, right, _ := strings.Cut(s, ".")
		if goName.MatchString(left) && goName.MatchString(right) {
			return c.checkQualified(left, right)
		}
	case c.BareNames && camelCase.MatchString(s):
		if !c.Index.Names[s] {
			return fmt.Sprintf("%s is declared nowhere in %s", s, c.Index.Root)
		}
	}
	return ""
}

// checkPath checks a folder or file path, or a "folder.Name" that names a
// declaration of the package in that folder (`gate/gateinput.Load`).
func (c *Checker) checkPath(s string) string {
	dir, file := path.Split(s)
	if pkgDir, name, ok := strings.Cut(file, "."); ok && goName.MatchString(name) && ast0(name) {
		for _, base := range c.Bases {
			if p := c.Index.Packages[path.Join(base, dir, pkgDir)]; p != nil {
				if p.Decls[name] || p.Members[name] != nil {
					return ""
				}
				return fmt.Sprintf("%s: package %s declares no %s", s, path.Join(base, dir, pkgDir), name)
			}
		}
	}
	for _, base := range c.Bases {
		if _, err := os.Stat(filepath.Join(c.Index.Root, base, s)); err == nil {
			return ""
		}
	}
	if !strings.Contains(file, ".") && len(strings.Split(s, "/")) > 1 && c.packageNamed(strings.Split(s, "/")[0]) == nil && !c.hasBaseDir(strings.Split(s, "/")[0]) {
		return "" // not a path of this module (a chart, a URL path)
	}
	return fmt.Sprintf("%s exists under none of %v in %s", s, c.Bases, c.Index.Root)
}

// ast0 reports whether name starts with a capital letter: in
// "folder.Name" only an exported name makes the span a Go reference
// (`service.yaml` is a file).
func ast0(name string) bool { return name[0] >= 'A' && name[0] <= 'Z' }

// hasBaseDir reports whether first is a folder under one of the bases.
func (c *Checker) hasBaseDir(first string) bool {
	for _, base := range c.Bases {
		if fi, err := os.Stat(filepath.Join(c.Index.Root, base, first)); err == nil && fi.IsDir() {
			return true
		}
	}
	return false
}

// checkQualified checks "pkg.Name" (a declaration of a package of that
// name) and "Type.Member" (a method or field of a type of that name);
// other dotted spans (`spec.release`, `service.yaml`) are not Go.
func (c *Checker) checkQualified(left, right string) string {
	if p := c.packageNamed(left); p != nil {
		for _, p := range c.packagesNamed(left) {
			if p.Decls[right] {
				return ""
			}
		}
		if !ast0(right) && c.Index.Names[right] {
			return "" // a field path that starts like a package (`status.pushes`)
		}
		return fmt.Sprintf("%s.%s: no package %s declares %s", left, right, left, right)
	}
	found := false
	for _, p := range c.Index.Packages {
		if members, ok := p.Members[left]; ok || p.Decls[left] {
			found = true
			if members[right] {
				return ""
			}
		}
	}
	if found {
		return fmt.Sprintf("%s.%s: type %s has no method or field %s", left, right, left, right)
	}
	return ""
}

// packageNamed returns a package called name, or nil.
func (c *Checker) packageNamed(name string) *Package {
	if ps := c.packagesNamed(name); len(ps) > 0 {
		return ps[0]
	}
	return nil
}

// packagesNamed returns every package called name.
func (c *Checker) packagesNamed(name string) []*Package {
	var out []*Package
	for _, p := range c.Index.Packages {
		if p.Name == name {
			out = append(out, p)
		}
	}
	return out
}
