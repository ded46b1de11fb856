// Package manifest parses and validates the service manifest, service.yaml,
// of the Sluice infra-repo convention (DESIGN.md §3), and lists the files a
// service depends on.
//
// The format is strict: only the documented fields are accepted, and every
// problem is reported with the file and line it comes from. Paths are
// confined to the repository: no absolute paths, no ".." segments, and no
// symlink that resolves outside the repository root.
//
// Exported API:
//
//	const APIVersion, Kind, FileName
//	type Service struct{ APIVersion, Kind, Name string; Owners []string; Chart Chart;
//	    Values []string; Terraform *Terraform; Environments []Environment; Dir, File string }
//	type Chart struct{ Path, Repo, Name, Version string }
//	type Terraform struct{ Dir string }
//	type Environment struct{ Name, Namespace string; Values []string;
//	    Terraform *EnvTerraform; Delivery Delivery; Approval Approval;
//	    Verification map[string]any;
//	    Kustomize *Kustomize; Manifests *Manifests }  // Source() SourceKind
//	type Kustomize struct{ Path string }
//	type Manifests struct{ Path string; Recurse bool; Include, Exclude []string }
//	type SourceKind string  // SourceChart, SourceKustomize, SourceManifests
//	func (s *Service) KustomizeDir(env string) string; func (s *Service) ManifestsDir(env string) string
//	func KustomizeInputs(repoRoot, dir string) ([]string, error)  // the overlay's walk and guard
//	var KustomizationFiles []string
//	const KustomizeChartsDir = ".sluice/kustomize-charts"  // charts fetched for helmCharts (helmcharts.go)
//	type HelmChart struct{ Name, Repo, Version, ReleaseName, Namespace, ValuesFile string; … }  // Key(), Root()
//	type HelmChartRef struct{ HelmChart; At Problem }
//	func KustomizeHelmCharts(repoRoot, dir string) []HelmChartRef
//	func HelmChartsOf(data []byte, dir, file string) ([]HelmChart, error)
//	type EnvTerraform struct{ Vars map[string]string; Workspace string }
//	type Approval struct{ Required int; Approvers []string; AllowAuthor bool; AutoApproveRisk AutoApproveRisk; Rollback RollbackMode }
//	type Delivery string      // DeliveryHelm (default), DeliveryArgoCD
//	type AutoApproveRisk string // AutoApproveNone (default), AutoApproveLow, AutoApproveMedium, AutoApproveHigh
//	type Problem struct{ File string; Line int; Message string }
//	type Error struct{ Problems []Problem }  // returned (as *Error) for every invalid manifest
//	func Parse(data []byte, file string) (*Service, error)
//	func Load(repoRoot, serviceDir string) (*Service, error)
//	func (s *Service) Environment(name string) (*Environment, bool)
//	func (s *Service) ValuesFiles(env string) ([]string, error)   // repo-relative, in order
//	func (s *Service) TerraformDir() string                        // repo-relative, "" when none
//	func (s *Service) ChartDir() string                            // repo-relative, "" for a chart repository
//	func (s *Service) ChartOf(env string) Chart; func (s *Service) ChartDirOf(env string) string  // with the environment's override
//	func (s *Service) CheckPaths(repoRoot string) error            // existence + confinement on disk
//	func (s *Service) Inputs(repoRoot string) ([]string, error)    // repo-relative inputs, sorted
//	func TerraformModules(repoRoot, dir string) ([]string, error)  // local module dirs, recursive
//	func ConfinedPath(repoRoot, rel string) (string, error)        // absolute path, confined through symlinks
//	var ErrOutsideRepo error                                        // wrapped by every confinement error
//
// All returned repository paths use forward slashes.
package manifest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/Masterminds/semver/v3"
	yaml "go.yaml.in/yaml/v3"
)

const (
	// APIVersion is the only accepted apiVersion of a service manifest.
	APIVersion = "sluice.dev/v1alpha1"
	// Kind is the only accepted kind of a service manifest.
	Kind = "Service"
	// FileName is the manifest's file name inside a service folder.
	FileName = "service.yaml"

	// MaxServiceName keeps "<service>-<environment>" a DNS label (API: 42).
	MaxServiceName = 42
	// MaxEnvironmentName is the API's limit for environment names.
	MaxEnvironmentName = 20
	// MaxValuesFiles is the API's limit on values files per release.
	MaxValuesFiles = 32
	// MaxRequired is the API's limit on required approvals.
	MaxRequired = 100
	// maxManifestSize bounds the input so a hostile file cannot exhaust memory.
	maxManifestSize = 1 << 20
)

// Delivery says how an environment's chart reaches the cluster.
type Delivery string

const (
	// DeliveryHelm installs with the embedded Helm SDK (the default).
	DeliveryHelm Delivery = "helm"
	// DeliveryArgoCD drives an Argo CD Application.
	DeliveryArgoCD Delivery = "argocd"
)

// AutoApproveRisk is the highest risk that passes the gate without approvals.
type AutoApproveRisk string

const (
	// AutoApproveNone never auto-approves (the default).
	AutoApproveNone AutoApproveRisk = "none"
	// AutoApproveLow auto-approves low-risk changes.
	AutoApproveLow AutoApproveRisk = "low"
	// AutoApproveMedium auto-approves low- and medium-risk changes.
	AutoApproveMedium AutoApproveRisk = "medium"
	// AutoApproveHigh auto-approves every change without a deny finding.
	AutoApproveHigh AutoApproveRisk = "high"
)

// Service is a parsed, validated service.yaml. Defaults are filled in:
// Delivery is "helm" and AutoApproveRisk "none" when the file omits them.
type Service struct {
	APIVersion   string        `yaml:"apiVersion" json:"apiVersion"`
	Kind         string        `yaml:"kind" json:"kind"`
	Name         string        `yaml:"name" json:"name"`
	Owners       []string      `yaml:"owners" json:"owners,omitempty"`
	Chart        Chart         `yaml:"chart" json:"chart"`
	Values       []string      `yaml:"values" json:"values,omitempty"`
	Terraform    *Terraform    `yaml:"terraform" json:"terraform,omitempty"`
	Environments []Environment `yaml:"environments" json:"environments"`

	// Dir is the service folder relative to the repository root ("" when
	// parsed without Load, meaning the repository root itself).
	Dir string `yaml:"-" json:"dir,omitempty"`
	// File is the name used for the manifest in error messages.
	File string `yaml:"-" json:"-"`

	lines map[string]int
}

// Chart is where the Helm chart comes from: exactly one of Path (a folder
// relative to the repository root) or Repo (with Name and Version).
type Chart struct {
	Path    string `yaml:"path" json:"path,omitempty"`
	Repo    string `yaml:"repo" json:"repo,omitempty"`
	Name    string `yaml:"name" json:"name,omitempty"`
	Version string `yaml:"version" json:"version,omitempty"`
}

// Terraform is the service's Terraform stack; Dir is relative to the
// service folder.
type Terraform struct {
	Dir string `yaml:"dir" json:"dir"`
}

// Environment is one deployment target of the service.
type Environment struct {
	Name      string        `yaml:"name" json:"name"`
	Namespace string        `yaml:"namespace" json:"namespace"`
	Values    []string      `yaml:"values" json:"values,omitempty"`
	Terraform *EnvTerraform `yaml:"terraform" json:"terraform,omitempty"`
	Delivery  Delivery      `yaml:"delivery" json:"delivery"`
	Approval  Approval      `yaml:"approval" json:"approval"`
	// Chart, when set, overrides the service's chart for this environment
	// (ChartOf): a path replaces it, a repo replaces its repository, and
	// name and version replace those (e.g. staging on a range, prod pinned).
	Chart *Chart `yaml:"chart" json:"chart,omitempty"`
	// Kustomize, when set, deploys a Kustomize overlay instead of the
	// service's chart (like a Flux Kustomization's path).
	Kustomize *Kustomize `yaml:"kustomize" json:"kustomize,omitempty"`
	// Manifests, when set, deploys a folder of plain YAML/JSON manifests
	// instead of the service's chart (like an Argo CD directory source).
	Manifests *Manifests `yaml:"manifests" json:"manifests,omitempty"`
	// Verification is the environment's verification block, as written;
	// the syncer decodes and validates it (the operator's API owns its
	// schema) and carries it on every change of the environment.
	Verification map[string]any `yaml:"verification" json:"verification,omitempty"`
}

// Kustomize is an environment's Kustomize overlay: Path is the folder
// holding its kustomization.yaml, relative to the service folder. Its
// bases and components may be anywhere in the repository.
type Kustomize struct {
	Path string `yaml:"path" json:"path"`
}

// Manifests is an environment's folder of plain manifests (*.yaml, *.yml,
// *.json), relative to the service folder. Recurse includes subfolders;
// Include and Exclude are glob patterns (path.Match) on file paths
// relative to Path: a file is read when it matches an Include pattern (or
// none is given) and no Exclude pattern.
type Manifests struct {
	Path    string   `yaml:"path" json:"path"`
	Recurse bool     `yaml:"recurse" json:"recurse,omitempty"`
	Include []string `yaml:"include" json:"include,omitempty"`
	Exclude []string `yaml:"exclude" json:"exclude,omitempty"`
}

// EnvTerraform holds an environment's Terraform variables and workspace.
type EnvTerraform struct {
	Vars      map[string]string `yaml:"vars" json:"vars,omitempty"`
	Workspace string            `yaml:"workspace" json:"workspace,omitempty"`
}

// Approval is the approval rule written in the manifest.
type Approval struct {
	Required        int             `yaml:"required" json:"required"`
	Approvers       []string        `yaml:"approvers" json:"approvers,omitempty"`
	AllowAuthor     bool            `yaml:"allowAuthor" json:"allowAuthor"`
	AutoApproveRisk AutoApproveRisk `yaml:"autoApproveRisk" json:"autoApproveRisk"`
	// Rollback is "auto" or "approval" (the default): whether a rollback
	// to the last verified revision may pass without approvals.
	Rollback RollbackMode `yaml:"rollback" json:"rollback,omitempty"`
}

// RollbackMode says how a rollback passes the gate.
type RollbackMode string

const (
	// RollbackApproval judges a rollback like any change (the default).
	RollbackApproval RollbackMode = "approval"
	// RollbackAuto lets an exact rollback to verified content through.
	RollbackAuto RollbackMode = "auto"
)

// Problem is one error in a manifest, located by file and line (0 when the
// line is not known).
type Problem struct {
	File    string `json:"file"`
	Line    int    `json:"line,omitempty"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	if p.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", p.File, p.Line, p.Message)
	}
	return fmt.Sprintf("%s: %s", p.File, p.Message)
}

// Error lists every problem found in a manifest.
type Error struct {
	Problems []Problem
}

func (e *Error) Error() string {
	parts := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		parts[i] = p.String()
	}
	return strings.Join(parts, "\n")
}

var (
	dnsLabel     = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	envName      = regexp.MustCompile(`^[a-z0-9]+$`)
	identity     = regexp.MustCompile(`^(k8s|k8s-group|github|gitlab|gitea):[^\s:][^\s]*$`)
	workspace    = regexp.MustCompile(`^[A-Za-z0-9_-]*$`)
	tfVarName    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]*$`)
	yamlLineInfo = regexp.MustCompile(`^(?:yaml: )?line (\d+): (.*)$`)
)

// Parse decodes and validates a manifest. file names the manifest in error
// messages. Paths are checked syntactically only; use Load or CheckPaths to
// check them against a checkout. Every error is an *Error.
func Parse(data []byte, file string) (*Service, error) {
	if file == "" {
		file = FileName
	}
	fail := func(line int, format string, args ...any) error {
		return &Error{Problems: []Problem{{File: file, Line: line, Message: fmt.Sprintf(format, args...)}}}
	}
	if len(data) > maxManifestSize {
		return nil, fail(0, "manifest is larger than %d bytes", maxManifestSize)
	}

	// First pass: the node tree, for line numbers and for a single document.
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fail(0, "manifest is empty")
		}
		return nil, yamlError(file, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fail(extra.Line, "manifest must hold exactly one YAML document")
	} else if !errors.Is(err, io.EOF) {
		return nil, yamlError(file, err)
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return nil, fail(root.Line, "manifest must be a YAML mapping")
	}

	// Second pass: strict decoding into the typed struct.
	svc := &Service{}
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(svc); err != nil {
		return nil, yamlError(file, err)
	}
	svc.File = file
	svc.lines = map[string]int{}
	indexLines(root.Content[0], "", svc.lines)

	if errs := svc.validate(); len(errs) > 0 {
		return nil, &Error{Problems: errs}
	}
	svc.setDefaults()
	return svc, nil
}

// yamlError turns a yaml.v3 error into an *Error with one problem per line
// it reports.
func yamlError(file string, err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		out := &Error{}
		for _, msg := range te.Errors {
			out.Problems = append(out.Problems, lineProblem(file, msg))
		}
		return out
	}
	return &Error{Problems: []Problem{lineProblem(file, err.Error())}}
}

func lineProblem(file, msg string) Problem {
	msg = strings.TrimSpace(msg)
	if m := yamlLineInfo.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		return Problem{File: file, Line: line, Message: strings.TrimPrefix(m[2], "yaml: ")}
	}
	return Problem{File: file, Message: strings.TrimPrefix(msg, "yaml: ")}
}

// indexLines records the line of every value node under a dotted path such
// as "environments[1].approval.required".
func indexLines(n *yaml.Node, prefix string, out map[string]int) {
	out[prefix] = n.Line
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			key := n.Content[i].Value
			p := key
			if prefix != "" {
				p = prefix + "." + key
			}
			// Point a key's problems at the key when the value spans lines.
			out[p+"#key"] = n.Content[i].Line
			indexLines(n.Content[i+1], p, out)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			indexLines(c, fmt.Sprintf("%s[%d]", prefix, i), out)
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			indexLines(n.Alias, prefix, out)
		}
	}
}

// line returns the line of the node at a dotted path, or of its nearest
// ancestor present in the file.
func (s *Service) line(p string) int {
	for {
		if l, ok := s.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return s.lines[""]
		}
		p = p[:i]
	}
}

func (s *Service) validate() []Problem {
	var out []Problem
	add := func(p string, format string, args ...any) {
		out = append(out, Problem{File: s.File, Line: s.line(p), Message: fmt.Sprintf(format, args...)})
	}

	if s.APIVersion != APIVersion {
		add("apiVersion", "apiVersion must be %q, not %q", APIVersion, s.APIVersion)
	}
	if s.Kind != Kind {
		add("kind", "kind must be %q, not %q", Kind, s.Kind)
	}
	switch {
	case s.Name == "":
		add("name", "name is required")
	case len(s.Name) > MaxServiceName || !dnsLabel.MatchString(s.Name):
		add("name", "name %q must be a DNS label of at most %d characters (lower-case letters, digits, '-')", s.Name, MaxServiceName)
	}
	for i, o := range s.Owners {
		if strings.TrimSpace(o) == "" || strings.ContainsAny(o, " \t\r\n") {
			add(fmt.Sprintf("owners[%d]", i), "owner %q must be a non-empty name without spaces", o)
		}
	}

	// Chart: a folder in the repo, or a chart repository with name and
	// version; environments may override it.
	c := s.Chart
	switch {
	case c == (Chart{}) && s.everyEnvironmentHasSource():
		// Every environment deploys a Kustomize overlay, manifests or its own chart.
	case c.Path == "" && c.Repo == "":
		add("chart", "chart needs either path or repo (or every environment a kustomize or manifests folder, or its own chart)")
	default:
		checkChart(c, "chart", add)
	}
	for i, v := range s.Values {
		if err := checkRelPath(v); err != nil {
			add(fmt.Sprintf("values[%d]", i), "values[%d]: %v", i, err)
		}
	}
	if s.Terraform != nil {
		if s.Terraform.Dir == "" {
			add("terraform", "terraform.dir is required")
		} else if err := checkRelPath(s.Terraform.Dir); err != nil {
			add("terraform.dir", "terraform.dir: %v", err)
		}
	}

	if len(s.Environments) == 0 {
		add("environments", "at least one environment is required")
	}
	seen := map[string]int{}
	for i := range s.Environments {
		e := &s.Environments[i]
		p := fmt.Sprintf("environments[%d]", i)
		switch {
		case e.Name == "":
			add(p, "environment name is required")
		case len(e.Name) > MaxEnvironmentName || !envName.MatchString(e.Name):
			add(p+".name", "environment name %q must match ^[a-z0-9]+$ (no dashes) and have at most %d characters", e.Name, MaxEnvironmentName)
		default:
			if j, dup := seen[e.Name]; dup {
				add(p+".name", "environment %q is declared twice (also environments[%d])", e.Name, j)
			}
			seen[e.Name] = i
		}
		switch {
		case e.Namespace == "":
			add(p, "environment %q: namespace is required", e.Name)
		case len(e.Namespace) > 63 || !dnsLabel.MatchString(e.Namespace):
			add(p+".namespace", "namespace %q must be a DNS label", e.Namespace)
		}
		for j, v := range e.Values {
			if err := checkRelPath(v); err != nil {
				add(fmt.Sprintf("%s.values[%d]", p, j), "environment %q values[%d]: %v", e.Name, j, err)
			}
		}
		if n := len(s.Values) + len(e.Values); n > MaxValuesFiles {
			add(p+".values", "environment %q has %d values files; at most %d", e.Name, n, MaxValuesFiles)
		}
		if e.Terraform != nil {
			if s.Terraform == nil {
				add(p+".terraform", "environment %q sets terraform but the service has no terraform.dir", e.Name)
			}
			if len(e.Terraform.Workspace) > 90 || !workspace.MatchString(e.Terraform.Workspace) {
				add(p+".terraform.workspace", "workspace %q must match ^[A-Za-z0-9_-]*$ (at most 90 characters)", e.Terraform.Workspace)
			}
			if len(e.Terraform.Vars) > 256 {
				add(p+".terraform.vars", "at most 256 terraform vars")
			}
			for _, k := range sortedKeys(e.Terraform.Vars) {
				if !tfVarName.MatchString(k) {
					add(p+".terraform.vars."+k, "terraform var name %q is not a valid identifier", k)
				}
			}
		}
		s.validateSource(e, p, add)
		s.validateEnvChart(e, p, add)
		switch e.Delivery {
		case "", DeliveryHelm, DeliveryArgoCD:
		default:
			add(p+".delivery", "delivery %q must be helm or argocd", e.Delivery)
		}
		a := e.Approval
		if a.Required < 0 || a.Required > MaxRequired {
			add(p+".approval.required", "approval.required must be between 0 and %d", MaxRequired)
		}
		dupApprover := map[string]bool{}
		for j, id := range a.Approvers {
			if len(id) > 320 || !identity.MatchString(id) {
				add(fmt.Sprintf("%s.approval.approvers[%d]", p, j),
					"approver %q must be k8s:<user>, k8s-group:<group>, github:<login>, gitlab:<user> or gitea:<user>", id)
			}
			if dupApprover[id] {
				add(fmt.Sprintf("%s.approval.approvers[%d]", p, j), "approver %q is listed twice", id)
			}
			dupApprover[id] = true
		}
		switch a.AutoApproveRisk {
		case "", AutoApproveNone, AutoApproveLow, AutoApproveMedium, AutoApproveHigh:
		default:
			add(p+".approval.autoApproveRisk", "autoApproveRisk %q must be none, low, medium or high", a.AutoApproveRisk)
		}
		switch a.Rollback {
		case "", RollbackApproval, RollbackAuto:
		default:
			add(p+".approval.rollback", "rollback %q must be auto or approval", a.Rollback)
		}
	}
	return out
}

// everyEnvironmentHasSource reports whether every environment names its own
// Kustomize overlay, manifests folder or chart, so the service needs no
// chart.
func (s *Service) everyEnvironmentHasSource() bool {
	for _, e := range s.Environments {
		if e.Kustomize == nil && e.Manifests == nil && (e.Chart == nil || (e.Chart.Path == "" && e.Chart.Repo == "")) {
			return false
		}
	}
	return len(s.Environments) > 0
}

// checkChart checks a chart (the service's, or an environment's merged
// with it) at the dotted path at.
func checkChart(c Chart, at string, add func(string, string, ...any)) {
	switch {
	case c.Path != "" && c.Repo != "":
		add(at, "chart takes path or repo, not both")
	case c.Path != "":
		if c.Name != "" || c.Version != "" {
			add(at, "chart name and version go with repo, not path")
		}
		if err := checkRelPath(c.Path); err != nil {
			add(at+".path", "chart.path: %v", err)
		}
	default:
		if !strings.HasPrefix(c.Repo, "https://") && !strings.HasPrefix(c.Repo, "oci://") {
			add(at+".repo", "chart.repo must start with https:// or oci://")
		} else if strings.Contains(strings.SplitN(c.Repo, "/", 4)[2], "@") {
			add(at+".repo", "chart.repo must not carry credentials")
		}
		if c.Name == "" {
			add(at, "chart.name is required with chart.repo")
		}
		if c.Version == "" {
			add(at, "chart.version is required with chart.repo")
		} else if _, err := semver.NewConstraint(c.Version); err != nil || len(c.Version) > 64 {
			add(at+".version", "chart.version %q must be a version or a semver range (e.g. 1.2.3, ~1.2, >=1.2.0 <2.0.0)", c.Version)
		}
	}
}

// validateEnvChart checks an environment's chart override: only with the
// service's chart (not with kustomize or manifests), and complete once
// merged with the service's chart.
func (s *Service) validateEnvChart(e *Environment, p string, add func(string, string, ...any)) {
	if e.Chart == nil {
		return
	}
	if e.Kustomize != nil || e.Manifests != nil {
		add(p+".chart", "environment %q: chart goes with a chart, not with kustomize or manifests", e.Name)
		return
	}
	c := s.ChartOf(e.Name)
	if c.Path == "" && c.Repo == "" {
		add(p+".chart", "environment %q: chart needs path or repo (here or in the service's chart)", e.Name)
		return
	}
	checkChart(c, p+".chart", add)
}

// ChartOf is the chart environment env deploys: the service's chart with
// the environment's override (Environment.Chart) applied.
func (s *Service) ChartOf(env string) Chart {
	c := s.Chart
	e, ok := s.Environment(env)
	if !ok || e.Chart == nil {
		return c
	}
	o := *e.Chart
	switch {
	case o.Path != "":
		return Chart{Path: o.Path, Name: o.Name, Version: o.Version}
	case o.Repo != "":
		c = Chart{Repo: o.Repo, Name: c.Name, Version: c.Version}
	}
	if o.Name != "" {
		c.Name = o.Name
	}
	if o.Version != "" {
		c.Version = o.Version
	}
	return c
}

// ChartDirOf is the chart folder environment env deploys, relative to the
// repository root, or "" when its chart comes from a chart repository.
func (s *Service) ChartDirOf(env string) string {
	if c := s.ChartOf(env); c.Path != "" {
		return path.Clean(c.Path)
	}
	return ""
}

// validateSource checks an environment's kustomize or manifests block.
func (s *Service) validateSource(e *Environment, p string, add func(string, string, ...any)) {
	if e.Kustomize == nil && e.Manifests == nil {
		return
	}
	if e.Kustomize != nil && e.Manifests != nil {
		add(p+".kustomize", "environment %q takes kustomize or manifests, not both", e.Name)
	}
	if len(e.Values) > 0 {
		add(p+".values", "environment %q: values files go with a chart, not with kustomize or manifests", e.Name)
	}
	if k := e.Kustomize; k != nil {
		if err := checkRelPath(k.Path); err != nil {
			add(p+".kustomize.path", "environment %q kustomize.path: %v", e.Name, err)
		}
	}
	if m := e.Manifests; m != nil {
		if err := checkRelPath(m.Path); err != nil {
			add(p+".manifests.path", "environment %q manifests.path: %v", e.Name, err)
		}
		for _, g := range []struct {
			what  string
			globs []string
		}{{"include", m.Include}, {"exclude", m.Exclude}} {
			what, globs := g.what, g.globs
			if len(globs) > 64 {
				add(p+".manifests."+what, "at most 64 %s patterns", what)
			}
			for j, g := range globs {
				if _, err := path.Match(g, ""); err != nil || g == "" || strings.HasPrefix(g, "/") || len(g) > 256 {
					add(fmt.Sprintf("%s.manifests.%s[%d]", p, what, j), "%s pattern %q must be a relative glob (path.Match syntax)", what, g)
				}
			}
		}
	}
}

// SourceKind says what an environment deploys.
type SourceKind string

const (
	// SourceChart is the service's Helm chart with values files.
	SourceChart SourceKind = "chart"
	// SourceKustomize is a Kustomize overlay's build.
	SourceKustomize SourceKind = "kustomize"
	// SourceManifests is a folder of plain manifests.
	SourceManifests SourceKind = "manifests"
)

// Source says what environment env deploys: its own Kustomize overlay or
// manifests folder, or else the service's chart.
func (e *Environment) Source() SourceKind {
	switch {
	case e.Kustomize != nil:
		return SourceKustomize
	case e.Manifests != nil:
		return SourceManifests
	}
	return SourceChart
}

// KustomizeDir returns the environment's overlay folder relative to the
// repository root, or "" when it deploys no overlay.
func (s *Service) KustomizeDir(env string) string {
	e, ok := s.Environment(env)
	if !ok || e.Kustomize == nil {
		return ""
	}
	return s.join(e.Kustomize.Path)
}

// ManifestsDir returns the environment's manifests folder relative to the
// repository root, or "" when it deploys none.
func (s *Service) ManifestsDir(env string) string {
	e, ok := s.Environment(env)
	if !ok || e.Manifests == nil {
		return ""
	}
	return s.join(e.Manifests.Path)
}

func (s *Service) setDefaults() {
	for i := range s.Environments {
		e := &s.Environments[i]
		if e.Delivery == "" {
			e.Delivery = DeliveryHelm
		}
		if e.Approval.AutoApproveRisk == "" {
			e.Approval.AutoApproveRisk = AutoApproveNone
		}
		if e.Approval.Rollback == "" {
			e.Approval.Rollback = RollbackApproval
		}
	}
}

// checkRelPath accepts a slash-separated relative path without ".." or "."
// segments, backslashes or control characters.
func checkRelPath(p string) error {
	switch {
	case p == "":
		return errors.New("path is empty")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("path %q must be relative, not absolute", p)
	case strings.ContainsAny(p, "\\\x00"):
		return fmt.Errorf("path %q must use forward slashes and no NUL", p)
	case len(p) > 512:
		return errors.New("path is longer than 512 characters")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("path %q holds a control character", p)
		}
	}
	if len(p) >= 2 && p[1] == ':' {
		return fmt.Errorf("path %q must be relative, not a drive path", p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return fmt.Errorf("path %q must not contain '..'", p)
		}
	}
	if c := path.Clean(p); c == "." {
		return fmt.Errorf("path %q names the folder itself", p)
	}
	return nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Environment returns the environment with the given name.
func (s *Service) Environment(name string) (*Environment, bool) {
	for i := range s.Environments {
		if s.Environments[i].Name == name {
			return &s.Environments[i], true
		}
	}
	return nil, false
}

// join makes a repo-relative path from the service folder and a path
// relative to it.
func (s *Service) join(p string) string {
	return path.Clean(path.Join(s.Dir, p))
}

// ValuesFiles returns the values files of an environment in the order Helm
// merges them: the service's values, then the environment's. The paths are
// relative to the repository root.
func (s *Service) ValuesFiles(env string) ([]string, error) {
	e, ok := s.Environment(env)
	if !ok {
		return nil, fmt.Errorf("service %q has no environment %q", s.Name, env)
	}
	out := make([]string, 0, len(s.Values)+len(e.Values))
	for _, v := range s.Values {
		out = append(out, s.join(v))
	}
	for _, v := range e.Values {
		out = append(out, s.join(v))
	}
	return out, nil
}

// TerraformDir returns the Terraform stack's folder relative to the
// repository root, or "" when the service has none.
func (s *Service) TerraformDir() string {
	if s.Terraform == nil {
		return ""
	}
	return s.join(s.Terraform.Dir)
}

// ChartDir returns the chart folder relative to the repository root, or ""
// when the chart comes from a chart repository.
func (s *Service) ChartDir() string {
	if s.Chart.Path == "" {
		return ""
	}
	return path.Clean(s.Chart.Path)
}
