package policy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/tester"
	"github.com/open-policy-agent/opa/v1/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// maxConfigFile bounds one file a policy reads with parse_config_file or
// parse_combined_config_files.
const maxConfigFile = 16 << 20

// conftestBuiltins provides conftest's parse_config, parse_config_file and
// parse_combined_config_files to one Engine's policies, so conftest policies
// and their unit tests load unchanged. Paths are relative to the calling
// policy file, as in conftest, but a file is read only when it lies inside
// one of the caller's policy folders (through os.Root, so a symbolic link
// cannot leave it either): policies may come from the infra repository, and
// a policy that could read any file could copy a credential into a finding.
// Parsers: yaml and json (conftest's other formats are refused with an error
// naming the parser).
type conftestBuiltins struct {
	roots []string // absolute, cleaned policy folders
}

func newConftestBuiltins(policyDirs []string) (*conftestBuiltins, error) {
	b := &conftestBuiltins{}
	for _, p := range policyDirs {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		if fi, err := os.Stat(abs); err == nil && !fi.IsDir() {
			abs = filepath.Dir(abs)
		}
		b.roots = append(b.roots, abs)
	}
	return b, nil
}

var configObject = types.NewObject(nil, types.NewDynamicProperty(types.S, types.A))

var (
	parseConfigDecl = &rego.Function{
		Name: "parse_config",
		Decl: types.NewFunction(types.Args(types.S, types.S), configObject),
	}
	parseConfigFileDecl = &rego.Function{
		Name: "parse_config_file",
		Decl: types.NewFunction(types.Args(types.S), configObject),
	}
	parseCombinedDecl = &rego.Function{
		Name: "parse_combined_config_files",
		Decl: types.NewFunction(types.Args(types.NewArray(nil, types.S)), configObject),
	}
)

// builtin is one of the functions: its declaration and implementation.
type builtin struct {
	decl *rego.Function
	impl func(*rego.Rego)
}

func (b *conftestBuiltins) all() []builtin {
	return []builtin{
		{parseConfigDecl, rego.Function2(parseConfigDecl, b.parseConfig)},
		{parseConfigFileDecl, rego.Function1(parseConfigFileDecl, b.parseConfigFile)},
		{parseCombinedDecl, rego.Function1(parseCombinedDecl, b.parseCombinedConfigFiles)},
	}
}

// decls are the declarations the compiler type-checks calls against.
func (b *conftestBuiltins) decls() map[string]*ast.Builtin {
	out := map[string]*ast.Builtin{}
	for _, f := range b.all() {
		out[f.decl.Name] = &ast.Builtin{Name: f.decl.Name, Decl: f.decl.Decl}
	}
	return out
}

// options are the implementations, as options of a rego query.
func (b *conftestBuiltins) options() []func(*rego.Rego) {
	var out []func(*rego.Rego)
	for _, f := range b.all() {
		out = append(out, f.impl)
	}
	return out
}

// testerBuiltins are the same for the Rego unit test runner.
func (b *conftestBuiltins) testerBuiltins() []*tester.Builtin {
	var out []*tester.Builtin
	for _, f := range b.all() {
		out = append(out, &tester.Builtin{Decl: &ast.Builtin{Name: f.decl.Name, Decl: f.decl.Decl}, Func: f.impl})
	}
	return out
}

// parseConfig is parse_config(parser, text): text parsed as conftest would.
func (b *conftestBuiltins) parseConfig(_ rego.BuiltinContext, parser, text *ast.Term) (*ast.Term, error) {
	name, ok := parser.Value.(ast.String)
	if !ok {
		return nil, errors.New("parse_config: the parser name is not a string")
	}
	s, ok := text.Value.(ast.String)
	if !ok {
		return nil, errors.New("parse_config: the configuration is not a string")
	}
	v, err := parseConfigText(string(name), []byte(s))
	if err != nil {
		return nil, fmt.Errorf("parse_config: %w", err)
	}
	return toTerm(v)
}

// parseConfigFile is parse_config_file(path), path relative to the policy.
func (b *conftestBuiltins) parseConfigFile(bctx rego.BuiltinContext, path *ast.Term) (*ast.Term, error) {
	p, ok := path.Value.(ast.String)
	if !ok {
		return nil, errors.New("parse_config_file: the path is not a string")
	}
	file, data, err := b.read(bctx, string(p))
	if err != nil {
		return nil, fmt.Errorf("parse_config_file: %w", err)
	}
	v, err := parseConfigText(parserFor(file), data)
	if err != nil {
		return nil, fmt.Errorf("parse_config_file: %s: %w", file, err)
	}
	return toTerm(v)
}

// parseCombinedConfigFiles is parse_combined_config_files(paths): conftest's
// --combine input, [{"path", "contents"}] sorted by path, a multi-document
// file giving one entry per document.
func (b *conftestBuiltins) parseCombinedConfigFiles(bctx rego.BuiltinContext, paths *ast.Term) (*ast.Term, error) {
	arr, ok := paths.Value.(*ast.Array)
	if !ok {
		return nil, errors.New("parse_combined_config_files: the paths are not an array")
	}
	type entry struct {
		path     string
		contents any
	}
	var entries []entry
	for i := range arr.Len() {
		p, ok := arr.Elem(i).Value.(ast.String)
		if !ok {
			return nil, fmt.Errorf("parse_combined_config_files: path %d is not a string", i)
		}
		file, data, err := b.read(bctx, string(p))
		if err != nil {
			return nil, fmt.Errorf("parse_combined_config_files: %w", err)
		}
		docs, err := parseConfigDocs(parserFor(file), data)
		if err != nil {
			return nil, fmt.Errorf("parse_combined_config_files: %s: %w", file, err)
		}
		for _, d := range docs {
			entries = append(entries, entry{file, d})
		}
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].path < entries[j].path })
	out := make([]any, 0, len(entries))
	for _, e := range entries {
		out = append(out, map[string]any{"path": e.path, "contents": e.contents})
	}
	return toTerm(out)
}

// read reads rel, relative to the calling policy file's folder, from inside
// a policy folder. It returns the path joined as conftest joins it.
func (b *conftestBuiltins) read(bctx rego.BuiltinContext, rel string) (string, []byte, error) {
	dir := "."
	if bctx.Location != nil && bctx.Location.File != "" {
		dir = filepath.Dir(bctx.Location.File)
	}
	file := filepath.Join(dir, rel)
	abs, err := filepath.Abs(file)
	if err != nil {
		return "", nil, err
	}
	for _, root := range b.roots {
		inside, err := filepath.Rel(root, abs)
		if err != nil || inside == ".." || strings.HasPrefix(inside, ".."+string(filepath.Separator)) {
			continue
		}
		r, err := os.OpenRoot(root)
		if err != nil {
			return "", nil, err
		}
		defer func() { _ = r.Close() }()
		f, err := r.Open(inside)
		if err != nil {
			return "", nil, fmt.Errorf("read %s: %w", file, err)
		}
		defer func() { _ = f.Close() }()
		data, err := io.ReadAll(io.LimitReader(f, maxConfigFile+1))
		if err != nil {
			return "", nil, fmt.Errorf("read %s: %w", file, err)
		}
		if len(data) > maxConfigFile {
			return "", nil, fmt.Errorf("read %s: larger than %d bytes", file, maxConfigFile)
		}
		return file, data, nil
	}
	return "", nil, fmt.Errorf("%s is outside the policy folders; a policy reads only files of its own folders", file)
}

// parserFor names the parser of a file by its extension, as conftest does
// for the formats provided here.
func parserFor(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".json":
		return "json"
	case ".yaml", ".yml":
		return "yaml"
	}
	return strings.TrimPrefix(strings.ToLower(filepath.Ext(file)), ".")
}

// parseConfigText parses data with the named parser. YAML with several
// documents gives a list of them, as conftest's YAML parser does.
func parseConfigText(parser string, data []byte) (any, error) {
	docs, err := parseConfigDocs(parser, data)
	switch {
	case err != nil:
		return nil, err
	case len(docs) == 0:
		return nil, nil
	case len(docs) == 1:
		return docs[0], nil
	}
	return docs, nil
}

// parseConfigDocs parses data with the named parser into its documents.
func parseConfigDocs(parser string, data []byte) ([]any, error) {
	switch parser {
	case "json":
		var v any
		if err := yaml.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("parse json: %w", err)
		}
		return []any{v}, nil
	case "yaml", "yml":
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
		var docs []any
		for {
			raw, err := r.Read()
			if errors.Is(err, io.EOF) {
				return docs, nil
			}
			if err != nil {
				return nil, fmt.Errorf("parse yaml: %w", err)
			}
			if len(bytes.TrimSpace(raw)) == 0 {
				continue
			}
			var v any
			if err := yaml.Unmarshal(raw, &v); err != nil {
				return nil, fmt.Errorf("parse yaml: %w", err)
			}
			docs = append(docs, v)
		}
	}
	return nil, fmt.Errorf("parser %q is not provided (yaml and json are)", parser)
}

func toTerm(v any) (*ast.Term, error) {
	val, err := ast.InterfaceToValue(v)
	if err != nil {
		return nil, err
	}
	return ast.NewTerm(val), nil
}
