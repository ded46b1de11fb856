// Package policy evaluates Rego policies (OPA v1) against Terraform plans and
// Kubernetes objects, with conftest's conventions so existing conftest
// policies work unchanged:
//
//   - rules named deny, violation, deny_x or violation_x are failures, warn
//     and warn_x are warnings; each returns strings or objects with a string
//     "msg" (other fields are metadata; an object without "msg" is an error,
//     as in conftest);
//   - the caller's policies are evaluated in the namespaces it selects
//     (default "main"; glob patterns; or every namespace), per document, or
//     once over all documents in conftest's --combine shape
//     [{"path": ..., "contents": ...}];
//   - exceptions: data.<ns>.exception[_][_] == "<rule suffix>" drops that rule;
//   - data comes from JSON/YAML files, placed as OPA's loader places them.
//
// conftest's builtins parse_config, parse_config_file and
// parse_combined_config_files are provided (builtins.go: yaml and json
// parsers; files only from inside the caller's policy folders), and Verify
// runs a policy folder's Rego unit tests as conftest verify does.
//
// Known differences from conftest: data.conftest.file (the input's file name)
// and conftest's print/trace output are not provided; the file builtins parse
// yaml and json only and read nothing outside the policy folders; a rule
// written "deny if { ... }" (a boolean) passes silently, exactly as in conftest.
//
// Sluice adds the severity "unverifiable": rules named unverifiable or
// unverifiable_x report checks that depend on values unknown until apply.
//
// The embedded default policies (module policies) are evaluated by input
// kind: sluice.terraform.* against plans, sluice.kubernetes.* against each
// object and sluice.kubernetes_combined.* against all objects of a chart. Their
// configuration lives at data.sluice.config; the caller's data is deep-merged
// over the defaults.
//
// An Engine compiles everything once (New), prepares each query on its first
// use, and is safe for concurrent use.
//
// Exported API (a test in kit/docs checks this list against the package):
//
//	type Options struct{ PolicyDirs, DataFiles, Namespaces []string; AllNamespaces, Combine, NoDefaults bool; Kinds []Kind }
//	type Document struct{ Path string; Value any }
//	type Kind string // KindTerraform, KindKubernetes
//	const KindTerraform, KindKubernetes Kind
//	const DefaultNamespace = "main"
//	type Problem struct // one problem of a policy or data file, with its place
//	type CompileError struct{ Problems []Problem } // a policy or data file that does not load
//	func (*CompileError) Error() string
//	type Engine struct // compiled policies, safe for concurrent use
//	func New(ctx, Options) (*Engine, error)
//	func (*Engine) Eval(ctx, Kind, []Document) ([]report.Finding, error)
//	func (*Engine) EvalSecrets(ctx, Kind, []Document) ([]report.Finding, []string, error) // and the secrets it redacted
//	func (*Engine) Namespaces() []string
//	type Part struct{ Combined bool; Policy string }
//	func (*Engine) Policies(Kind) (perDoc, combined []string)
//	func (*Engine) EvalPart(ctx, Kind, Part, []Document) ([]report.Finding, error)
//	func (*Engine) Config(path ...string) any
//	type TestResult struct{ File, Name string; Passed, Skipped bool; Error error }
//	func Verify(ctx, Options) ([]TestResult, error)
//	func BundleDigest(Options) (string, error)
//	func ParseJSON([]byte) (ast.Value, bool)
//	const Redacted = "[REDACTED]"
//	func Redact(findings, inputs ...any) []report.Finding
//	type Redactor struct // the secrets of some inputs, collected once
//	func NewRedactor(extra []string, inputs ...any) *Redactor
//	func (*Redactor) String(string) string
package policy

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/loader"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/storage"
	"github.com/open-policy-agent/opa/v1/storage/inmem"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
	"github.com/sluice-gitops/sluice/policies"
)

// Kind says what a document is, which selects the default policies.
type Kind string

const (
	// KindTerraform is a Terraform plan in JSON (terraform show -json).
	KindTerraform Kind = "terraform"
	// KindKubernetes is a rendered Kubernetes object.
	KindKubernetes Kind = "kubernetes"
)

// DefaultNamespace is conftest's default namespace for the caller's policies.
const DefaultNamespace = "main"

// Options configure an Engine.
type Options struct {
	// PolicyDirs are the caller's policy files or folders (.rego files only,
	// recursively, as conftest --policy loads them).
	PolicyDirs []string
	// DataFiles are JSON/YAML files or folders (conftest --data).
	DataFiles []string
	// Namespaces select the caller's packages; glob patterns are allowed
	// (conftest --namespace). Empty means "main".
	Namespaces []string
	// AllNamespaces evaluates every package of the caller's policies.
	AllNamespaces bool
	// Combine evaluates the caller's policies once over all documents in
	// conftest's --combine shape instead of once per document.
	Combine bool
	// NoDefaults leaves out the embedded default policies (their data stays,
	// so a caller's policy may still read data.sluice.config).
	NoDefaults bool
	// Kinds limits the default policies loaded to those for these input
	// kinds (a CLI run checks one kind); empty loads them all. Eval of a kind
	// left out evaluates only the caller's policies.
	Kinds []Kind
}

// Document is one input: a decoded JSON/YAML value and the file it came from.
type Document struct {
	Path  string
	Value any
}

// Problem is one error in a policy or data file.
type Problem struct {
	File    string
	Line    int
	Message string
}

// CompileError reports policies or data that do not load or compile; it is a
// usage error (exit code 2 in the CLI). Each problem names its file and line.
type CompileError struct {
	Problems []Problem
}

func (e *CompileError) Error() string {
	var b strings.Builder
	b.WriteString("policy error")
	if len(e.Problems) > 1 {
		fmt.Fprintf(&b, "s (%d)", len(e.Problems))
	}
	for i, p := range e.Problems {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		switch {
		case p.File != "" && p.Line > 0:
			fmt.Fprintf(&b, "%s:%d: %s", p.File, p.Line, p.Message)
		case p.File != "":
			fmt.Fprintf(&b, "%s: %s", p.File, p.Message)
		default:
			b.WriteString(p.Message)
		}
	}
	return b.String()
}

var (
	failureRule      = regexp.MustCompile(`^(deny|violation)(_[a-zA-Z0-9]+)*$`)
	warningRule      = regexp.MustCompile(`^warn(_[a-zA-Z0-9]+)*$`)
	unverifiableRule = regexp.MustCompile(`^unverifiable(_[a-zA-Z0-9]+)*$`)
)

func ruleSeverity(name string) (report.Severity, bool) {
	switch {
	case failureRule.MatchString(name):
		return report.SeverityDeny, true
	case warningRule.MatchString(name):
		return report.SeverityWarn, true
	case unverifiableRule.MatchString(name):
		return report.SeverityUnverifiable, true
	}
	return "", false
}

// ruleRef is one rule to query: data.<namespace>.<name>.
type ruleRef struct {
	namespace string
	name      string
	severity  report.Severity
	// exception is the conftest exception suffix, set when the namespace
	// defines exception rules.
	exception *string
}

// maxParts bounds the parallel queries of one evaluation.
const maxParts = 2

// querySet is a query that evaluates a list of rules at once. It is
// prepared on first use, so a run that never evaluates a kind never pays
// for it.
type querySet struct {
	rules    []ruleRef
	compiler *ast.Compiler
	store    storage.Store
	// funcs implement conftest's builtins the compiler declares.
	funcs []func(*rego.Rego)

	once  sync.Once
	query rego.PreparedEvalQuery
	err   error

	// split, when set, evaluates the same rules as parallel parts by
	// namespace (balance.go).
	split *balancer
}

// prepared returns the prepared query, preparing it once.
func (qs *querySet) prepared(ctx context.Context) (rego.PreparedEvalQuery, error) {
	qs.once.Do(func() {
		// One query evaluates every rule: out := [[x | x := data.ns.rule], ...].
		// A comprehension keeps an undefined rule from failing the others.
		terms := make([]string, 0, 2*len(qs.rules))
		for _, r := range qs.rules {
			terms = append(terms, "[x | x := data."+quoteRef(r.namespace)+"."+r.name+"]")
			if r.exception != nil {
				terms = append(terms, fmt.Sprintf("[true | data.%s.exception[_][_] == %q]", quoteRef(r.namespace), *r.exception))
			} else {
				terms = append(terms, "[]")
			}
		}
		q := "out := [" + strings.Join(terms, ", ") + "]"
		qs.query, qs.err = rego.New(append([]func(*rego.Rego){rego.Query(q), rego.Compiler(qs.compiler), rego.Store(qs.store)}, qs.funcs...)...).
			PrepareForEval(context.WithoutCancel(ctx))
		if qs.err != nil {
			qs.err = fmt.Errorf("prepare policy query: %w", qs.err)
		}
	})
	return qs.query, qs.err
}

// defaultDirs are the embedded folders holding the defaults for kinds.
func defaultDirs(kinds []Kind) []string {
	if len(kinds) == 0 {
		return []string{"rego"}
	}
	dirs := []string{"rego/lib"}
	for _, k := range kinds {
		switch k {
		case KindTerraform:
			dirs = append(dirs, "rego/terraform")
		case KindKubernetes:
			dirs = append(dirs, "rego/kubernetes", "rego/kubernetes_combined")
		}
	}
	return dirs
}

// Engine holds compiled policies and prepared queries. It is safe for
// concurrent use.
type Engine struct {
	opts       Options
	data       map[string]any // merged policy data, read-only after New
	namespaces []string       // the caller's selected namespaces

	terraform, kubeDoc *querySet // per document
	kubeCombined       *querySet // default combined packages
	userCombined       *querySet // the caller's packages with Combine

	// singles are the one-rule query sets EvalPart prepared, by set and rule.
	singles sync.Map
}

// New loads the default policies and the caller's, compiles them once and
// prepares the queries. A policy that does not parse or compile returns a
// *CompileError naming file and line.
func New(ctx context.Context, opts Options) (*Engine, error) {
	in, err := loadInputs(opts)
	if err != nil {
		return nil, err
	}
	modules, defaultFiles, data, builtins, compiler := in.modules, in.defaultFiles, in.data, in.builtins, in.newCompiler()
	compiler.Compile(modules)
	if compiler.Failed() {
		return nil, astError(compiler.Errors)
	}
	store := inmem.NewFromObject(data)

	e := &Engine{opts: opts, data: data}

	// Rules by namespace, split between the defaults and the caller's.
	defaultRules := map[string][]ruleRef{}
	userRules := map[string][]ruleRef{}
	userNamespaces := map[string]bool{}
	hasException := map[string]bool{}
	for name, m := range compiler.Modules {
		ns := strings.TrimPrefix(m.Package.Path.String(), "data.")
		if !defaultFiles[name] {
			userNamespaces[ns] = true
		}
		for _, r := range m.Rules {
			rn := ruleName(r)
			if rn == "exception" {
				hasException[ns] = true
			}
		}
	}
	seen := map[string]bool{}
	for name, m := range compiler.Modules {
		ns := strings.TrimPrefix(m.Package.Path.String(), "data.")
		for _, r := range m.Rules {
			rn := ruleName(r)
			sev, ok := ruleSeverity(rn)
			if !ok || seen[ns+"/"+rn] {
				continue
			}
			seen[ns+"/"+rn] = true
			ref := ruleRef{namespace: ns, name: rn, severity: sev}
			if defaultFiles[name] {
				defaultRules[ns] = append(defaultRules[ns], ref)
			} else {
				userRules[ns] = append(userRules[ns], ref)
			}
		}
	}

	// The caller's namespaces, as conftest selects them.
	var all []string
	for ns := range userNamespaces {
		all = append(all, ns)
	}
	sort.Strings(all)
	switch {
	case opts.AllNamespaces:
		e.namespaces = all
	default:
		patterns := opts.Namespaces
		if len(patterns) == 0 {
			patterns = []string{DefaultNamespace}
		}
		for _, ns := range all {
			for _, p := range patterns {
				if ok, err := path.Match(p, ns); err != nil {
					return nil, &CompileError{Problems: []Problem{{Message: fmt.Sprintf("bad --namespace pattern %q: %v", p, err)}}}
				} else if ok {
					e.namespaces = append(e.namespaces, ns)
					break
				}
			}
		}
	}

	collect := func(rules map[string][]ruleRef, match func(ns string) bool) []ruleRef {
		var out []ruleRef
		for ns, rs := range rules {
			if match(ns) {
				out = append(out, rs...)
			}
		}
		return out
	}
	var selected []ruleRef
	for _, ns := range e.namespaces {
		selected = append(selected, userRules[ns]...)
	}
	withPrefix := func(prefix string) func(string) bool {
		return func(ns string) bool { return strings.HasPrefix(ns, prefix+".") }
	}
	tfRules := collect(defaultRules, withPrefix(policies.TerraformNamespace))
	kubeRules := collect(defaultRules, withPrefix(policies.KubernetesNamespace))
	combinedRules := collect(defaultRules, withPrefix(policies.KubernetesCombinedNamespace))
	if !opts.Combine {
		tfRules = append(tfRules, selected...)
		kubeRules = append(kubeRules, selected...)
	}

	prepare := func(rules []ruleRef) (*querySet, error) {
		for i := range rules {
			if hasException[rules[i].namespace] {
				s := exceptionSuffix(rules[i].name)
				rules[i].exception = &s
			}
		}
		sort.Slice(rules, func(i, j int) bool {
			if rules[i].namespace != rules[j].namespace {
				return rules[i].namespace < rules[j].namespace
			}
			return rules[i].name < rules[j].name
		})
		qs := &querySet{rules: rules, compiler: compiler, store: store, funcs: builtins.options()}
		// With more than one core, a set spanning several namespaces is
		// evaluated as parallel queries: policy evaluation is most of the
		// time a large plan takes.
		qs.split = newBalancer(qs, min(runtime.GOMAXPROCS(0), maxParts))
		return qs, nil
	}
	if e.terraform, err = prepare(tfRules); err != nil {
		return nil, err
	}
	if e.kubeDoc, err = prepare(kubeRules); err != nil {
		return nil, err
	}
	if e.kubeCombined, err = prepare(combinedRules); err != nil {
		return nil, err
	}
	if opts.Combine {
		if e.userCombined, err = prepare(selected); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// inputs are what an Engine or a Verify run compiles: the modules (the
// embedded defaults marked), the data and conftest's builtins.
type inputs struct {
	modules      map[string]*ast.Module
	defaultFiles map[string]bool
	data         map[string]any
	builtins     *conftestBuiltins
}

func loadInputs(opts Options) (*inputs, error) {
	in := &inputs{}
	var err error
	if in.modules, in.defaultFiles, err = loadModules(opts); err != nil {
		return nil, err
	}
	if in.data, err = loadData(opts.DataFiles); err != nil {
		return nil, err
	}
	if in.builtins, err = newConftestBuiltins(opts.PolicyDirs); err != nil {
		return nil, err
	}
	return in, nil
}

// newCompiler is a compiler that knows conftest's builtins.
func (in *inputs) newCompiler() *ast.Compiler {
	return ast.NewCompiler().WithEnablePrintStatements(false).WithBuiltins(in.builtins.decls())
}

// loadModules parses the embedded default policies (unless left out) and
// the caller's; defaultFiles marks the embedded ones.
func loadModules(opts Options) (modules map[string]*ast.Module, defaultFiles map[string]bool, err error) {
	modules = map[string]*ast.Module{}
	defaultFiles = map[string]bool{}
	if !opts.NoDefaults {
		res, err := loader.NewFileLoader().WithFS(policies.FS()).WithRegoVersion(ast.RegoV1).
			WithProcessAnnotation(true).Filtered(defaultDirs(opts.Kinds), func(_ string, info fs.FileInfo, _ int) bool {
			return !info.IsDir() && (!strings.HasSuffix(info.Name(), ".rego") || strings.HasSuffix(info.Name(), "_test.rego"))
		})
		if err != nil {
			return nil, nil, fmt.Errorf("load embedded default policies: %w", err)
		}
		for name, m := range res.ParsedModules() {
			key := "embedded:" + name
			modules[key] = m
			defaultFiles[key] = true
		}
	}
	if len(opts.PolicyDirs) > 0 {
		for _, p := range opts.PolicyDirs {
			if _, err := os.Stat(p); err != nil {
				return nil, nil, &CompileError{Problems: []Problem{{File: p, Message: "policy path does not exist or is unreadable"}}}
			}
		}
		res, err := loader.NewFileLoader().WithRegoVersion(ast.RegoV1).WithProcessAnnotation(true).
			Filtered(opts.PolicyDirs, func(_ string, info fs.FileInfo, _ int) bool {
				return !info.IsDir() && !strings.HasSuffix(info.Name(), ".rego")
			})
		if err != nil {
			return nil, nil, loadError(err)
		}
		if len(res.Modules) == 0 {
			return nil, nil, &CompileError{Problems: []Problem{{Message: fmt.Sprintf("no .rego policies found in %s", strings.Join(opts.PolicyDirs, ", "))}}}
		}
		for name, m := range res.ParsedModules() {
			modules[name] = m
		}
	}
	if err := ifWithoutContains(modules); err != nil {
		return nil, nil, err
	}
	return modules, defaultFiles, nil
}

// Config returns the value at data.sluice.config.<path...> (the defaults
// merged with the caller's data), or nil when unset. Callers must not modify it.
func (e *Engine) Config(path ...string) any {
	var v any = e.data
	for _, p := range append([]string{"sluice", "config"}, path...) {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// Namespaces returns the caller's namespaces the engine evaluates.
func (e *Engine) Namespaces() []string { return append([]string(nil), e.namespaces...) }

// Eval evaluates the policies for kind against docs: per document, plus (for
// Kubernetes) the combined default packages over all of them, plus the
// caller's policies in combined mode when Options.Combine is set. Findings
// are sorted and secret values found in the documents are redacted from
// their messages.
func (e *Engine) Eval(ctx context.Context, kind Kind, docs []Document) ([]report.Finding, error) {
	findings, _, err := e.EvalSecrets(ctx, kind, docs)
	return findings, err
}

// EvalSecrets is Eval that also returns the secret strings it found in the
// documents and redacted from the findings (longest first, never nil when
// err is nil), so a caller that shows more of the same documents redacts
// them without walking them again (review.Input.PlanSecrets).
func (e *Engine) EvalSecrets(ctx context.Context, kind Kind, docs []Document) ([]report.Finding, []string, error) {
	var perDoc *querySet
	switch kind {
	case KindTerraform:
		perDoc = e.terraform
	case KindKubernetes:
		perDoc = e.kubeDoc
	default:
		return nil, nil, fmt.Errorf("unknown input kind %q", kind)
	}
	inputs := make([]any, 0, len(docs))
	for _, d := range docs {
		inputs = append(inputs, d.Value)
	}
	// The secrets Redact needs are gathered while the policies run (on a
	// core that is usually idle then; a large plan takes milliseconds to
	// walk). The channel is buffered, so an early return leaks nothing.
	secretsCh := make(chan []string, 1)
	go func() { secretsCh <- secretsOf(inputs...) }()

	var findings []report.Finding
	for _, d := range docs {
		fs, err := e.evalSet(ctx, perDoc, d.Value, d.Path, d.Value)
		if err != nil {
			return nil, nil, fmt.Errorf("evaluate %s: %w", d.Path, err)
		}
		findings = append(findings, fs...)
	}
	combined := combine(docs)
	if kind == KindKubernetes && len(docs) > 0 {
		fs, err := e.evalSet(ctx, e.kubeCombined, combined, "", nil)
		if err != nil {
			return nil, nil, fmt.Errorf("evaluate combined objects: %w", err)
		}
		findings = append(findings, fs...)
	}
	if e.userCombined != nil && len(docs) > 0 {
		fs, err := e.evalSet(ctx, e.userCombined, combined, "", nil)
		if err != nil {
			return nil, nil, fmt.Errorf("evaluate combined documents: %w", err)
		}
		findings = append(findings, fs...)
	}
	secrets := <-secretsCh
	if secrets == nil {
		secrets = []string{} // gathered, none found
	}
	if len(findings) > 0 {
		findings = redactWith(findings, secrets)
	}
	report.SortFindings(findings)
	return findings, secrets, nil
}

// combine builds conftest's --combine input: [{"path", "contents"}] sorted by
// path (stable for documents of one file).
func combine(docs []Document) []any {
	out := make([]any, 0, len(docs))
	idx := make([]int, len(docs))
	for i := range idx {
		idx[i] = i
	}
	sort.SliceStable(idx, func(a, b int) bool { return docs[idx[a]].Path < docs[idx[b]].Path })
	for _, i := range idx {
		out = append(out, map[string]any{"path": docs[i].Path, "contents": docs[i].Value})
	}
	return out
}

// evalSet runs one prepared query against input and converts the rule values
// to findings. obj, when it is a Kubernetes object, names the resource of
// findings that do not name one.
func (e *Engine) evalSet(ctx context.Context, qs *querySet, input any, file string, obj any) ([]report.Finding, error) {
	if qs == nil || len(qs.rules) == 0 {
		return nil, nil
	}
	value, err := ast.InterfaceToValue(input)
	if err != nil {
		return nil, fmt.Errorf("convert input: %w", err)
	}
	if qs.split == nil {
		return e.evalQuery(ctx, qs, value, file, obj)
	}
	return qs.split.eval(ctx, e, value, file, obj)
}

// evalQuery evaluates one prepared query against a converted input.
func (e *Engine) evalQuery(ctx context.Context, qs *querySet, value ast.Value, file string, obj any) ([]report.Finding, error) {
	query, err := qs.prepared(ctx)
	if err != nil {
		return nil, err
	}
	rs, err := query.Eval(ctx, rego.EvalParsedInput(value))
	if err != nil {
		return nil, fmt.Errorf("evaluate policies: %w", err)
	}
	if len(rs) == 0 {
		return nil, nil
	}
	out, ok := rs[0].Bindings["out"].([]any)
	if !ok || len(out) != 2*len(qs.rules) {
		return nil, fmt.Errorf("unexpected policy query result")
	}
	defaultResource := objectID(obj)
	var findings []report.Finding
	for i, r := range qs.rules {
		if excepted, _ := out[2*i+1].([]any); len(excepted) > 0 {
			continue
		}
		values, _ := out[2*i].([]any)
		if len(values) == 0 {
			continue
		}
		// Only a set (or array) of messages counts, as in conftest; a
		// boolean or object rule value passes.
		msgs, ok := values[0].([]any)
		if !ok {
			continue
		}
		for _, m := range msgs {
			f := report.Finding{
				Severity: r.severity,
				Source:   "policy",
				Policy:   r.namespace + "/" + r.name,
				Resource: defaultResource,
				File:     file,
			}
			switch v := m.(type) {
			case string:
				f.Message = v
			case map[string]any:
				msg, ok := v["msg"].(string)
				if !ok {
					return nil, fmt.Errorf("rule data.%s.%s returned an object without a string \"msg\" field", r.namespace, r.name)
				}
				f.Message = msg
				if res, ok := v["resource"].(string); ok && res != "" {
					f.Resource = res
				}
			default:
				continue
			}
			findings = append(findings, f)
		}
	}
	return findings, nil
}

// objectID names a Kubernetes object as Kind/namespace/name ("" for other input).
func objectID(obj any) string {
	m, ok := obj.(map[string]any)
	if !ok {
		return ""
	}
	kind, _ := m["kind"].(string)
	meta, _ := m["metadata"].(map[string]any)
	name, _ := meta["name"].(string)
	ns, _ := meta["namespace"].(string)
	if kind == "" || name == "" {
		return ""
	}
	if ns == "" {
		return kind + "/" + name
	}
	return kind + "/" + ns + "/" + name
}

func ruleName(r *ast.Rule) string {
	if r.Head == nil {
		return ""
	}
	if r.Head.Name != "" {
		return r.Head.Name.String()
	}
	if len(r.Head.Reference) > 0 {
		if v, ok := r.Head.Reference[0].Value.(ast.Var); ok {
			return string(v)
		}
	}
	return ""
}

// exceptionSuffix is conftest's removeRulePrefix.
func exceptionSuffix(rule string) string {
	if rule == "violation" || rule == "deny" || rule == "warn" {
		return ""
	}
	for _, p := range []string{"violation_", "deny_", "warn_"} {
		rule = strings.TrimPrefix(rule, p)
	}
	return rule
}

// quoteRef writes a package path as a Rego reference, quoting segments that
// are not plain identifiers.
func quoteRef(ns string) string {
	parts := strings.Split(ns, ".")
	var b strings.Builder
	for i, p := range parts {
		if ast.IsVarCompatibleString(p) || i == 0 {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(p)
			continue
		}
		fmt.Fprintf(&b, "[%q]", p)
	}
	return b.String()
}

// ifWithoutContains rejects "deny if {...}" (a boolean) where conftest
// expects a set of messages, as conftest does.
func ifWithoutContains(modules map[string]*ast.Module) error {
	var problems []Problem
	for _, m := range modules {
		for _, r := range m.Rules {
			if r.Head == nil || r.Head.Name != "" || r.Head.Value == nil || len(r.Head.Reference) == 0 {
				continue
			}
			name := r.Head.Reference[0].Value.String()
			if _, ok := ruleSeverity(name); ok && r.Head.Value.String() == "true" {
				problems = append(problems, Problem{File: r.Location.File, Line: r.Location.Row,
					Message: fmt.Sprintf("rule %s uses 'if' without 'contains'; write '%s contains msg if { ... }'", name, name)})
			}
		}
	}
	if len(problems) > 0 {
		sort.Slice(problems, func(i, j int) bool {
			return problems[i].File+fmt.Sprint(problems[i].Line) < problems[j].File+fmt.Sprint(problems[j].Line)
		})
		return &CompileError{Problems: problems}
	}
	return nil
}

// loadData merges the caller's data files over the default configuration.
func loadData(paths []string) (map[string]any, error) {
	raw, err := fs.ReadFile(policies.FS(), policies.DefaultDataPath)
	if err != nil {
		return nil, fmt.Errorf("read default policy data: %w", err)
	}
	var data map[string]any
	if err := yaml.Unmarshal(raw, &data); err != nil {
		return nil, fmt.Errorf("parse default policy data: %w", err)
	}
	if len(paths) == 0 {
		return data, nil
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return nil, &CompileError{Problems: []Problem{{File: p, Message: "data path does not exist or is unreadable"}}}
		}
	}
	docs, err := loader.NewFileLoader().Filtered(paths, func(_ string, info fs.FileInfo, _ int) bool {
		if info.IsDir() {
			return false
		}
		switch filepath.Ext(info.Name()) {
		case ".yaml", ".yml", ".json":
			return false
		}
		return true
	})
	if err != nil {
		return nil, loadError(err)
	}
	return deepMerge(data, docs.Documents), nil
}

// deepMerge returns base with over merged in; over wins on conflicts.
func deepMerge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if bm, ok := out[k].(map[string]any); ok {
			if om, ok := v.(map[string]any); ok {
				out[k] = deepMerge(bm, om)
				continue
			}
		}
		out[k] = v
	}
	return out
}

// loadError converts a loader error into a CompileError with locations.
func loadError(err error) error {
	var problems []Problem
	if errs, ok := err.(loader.Errors); ok {
		for _, e := range errs {
			if ae, ok := e.(*ast.Error); ok {
				problems = append(problems, astProblem(ae))
				continue
			}
			problems = append(problems, Problem{Message: e.Error()})
		}
	}
	if len(problems) == 0 {
		problems = append(problems, Problem{Message: err.Error()})
	}
	return &CompileError{Problems: problems}
}

func astError(errs ast.Errors) error {
	problems := make([]Problem, 0, len(errs))
	for _, e := range errs {
		problems = append(problems, astProblem(e))
	}
	return &CompileError{Problems: problems}
}

func astProblem(e *ast.Error) Problem {
	p := Problem{Message: e.Code + ": " + e.Message}
	if e.Location != nil {
		p.File = e.Location.File
		p.Line = e.Location.Row
	}
	return p
}
