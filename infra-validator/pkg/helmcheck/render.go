// Package helmcheck checks a Helm chart with the Helm v3 SDK, client-only
// (never the helm binary, never a cluster): it validates the merged values
// against values.schema.json, renders the chart as `helm install` would for a
// given release name, namespace and Kubernetes version, computes the
// manifestDigest over exactly the bytes Helm hands a post-renderer, decodes
// every rendered object strictly against the Kubernetes scheme, and rates
// the risk of the change against the previously rendered manifest.
//
// The digest: Helm v3 passes a post-renderer the sorted non-hook manifests
// written as "---\n# Source: <file>\n<content>\n", and keeps hooks out of
// it. Render installs through action.Install (DryRun, ClientOnly, Replace)
// with a DigestPostRenderer and hashes those bytes together with the hooks
// of the release record (ReleaseDigest; for a chart without hooks, exactly
// the post-renderer's bytes). The operator's Helm applier computes the same
// digest from the release record Helm is about to store, before any hook
// runs, given the same chart, values files (MergeValues), release name and
// namespace, and a cluster of the same Kubernetes version. The chart's
// crds/ folder is not passed to post-renderers, so the digest does not
// cover it (the content digest of the artifact does); a chart with crds/
// gets a warn finding. Templates that use lookup, random or time
// functions, .Release.Revision/IsUpgrade/IsInstall or
// .Capabilities.APIVersions render differently at install time and get
// warn findings too: the applier would refuse them with ManifestMismatch.
//
// With Options.Confine set, every object (hooks and crds/ included) must
// stay in the release namespace unless the Confinement allows it: see
// KindScope for how the scope of a kind is known without a cluster.
//
// Exported API:
//
//	func Render(ctx context.Context, opts Options) (*Result, error)
//	func GeneratedSource(template string) string
//	func NewClientOnlyInstall(opts Options, pr postrender.PostRenderer) (*action.Install, error)
//	func RunWithTimeout(ctx context.Context, inst *action.Install, ch *chart.Chart, vals map[string]any, timeout time.Duration) (*release.Release, error)
//	func ManifestDigest(manifest []byte) string
//	func ReleaseDigest(manifest []byte, hooks []*release.Hook) string
//	type Confinement struct{ ExtraNamespaces []string; ClusterKinds []schema.GroupKind } // Check(...)
//	func KindScope(schema.GroupKind) Scope; func BuiltinKinds() map[schema.GroupKind]bool; func IsList(Object) bool
//	var ErrOutsideNamespace error
//	type DigestPostRenderer struct{ Expected string } // Run, Digest() (string, bool), Manifest() []byte
//	var ErrManifestMismatch error
//	func LoadChart(path string) (*chart.Chart, error)
//	func MergeValues(files []string) (map[string]any, error)
//	func ParseManifest(manifest string) ([]Object, error)
//	const DefaultKubeVersion = "v1.37.2"; const DefaultTimeout = 60 * time.Second
//	type Options struct{ Chart string; Loaded *chart.Chart; Generated bool; ValuesFiles []string; ReleaseName, Namespace, KubeVersion string;
//	    APIVersions []string; Timeout time.Duration; Previous string; Scheme *runtime.Scheme; SourcePrefix string;
//	    Confine *Confinement }
//	type Object struct{ APIVersion, Kind, Namespace, ExplicitNamespace, Name, Source string; Hook, CRDFolder bool; Object map[string]any }
//	func (o Object) ID() string
//	type Result struct{ ChartName, ChartVersion, Manifest, Rendered, ManifestDigest string; Objects []Object;
//	    Values map[string]any; Findings []report.Finding; Risk report.Risk; RiskReasons []string }
//
// Errors are returned for bad options and unreadable input (chart, values
// files); problems in the chart's content (template errors, schema
// violations, invalid objects) are findings, and a chart that does not
// render gets risk high and no digest.
package helmcheck

import (
	"context"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/postrender"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// DefaultTimeout bounds rendering when Options.Timeout is zero.
const DefaultTimeout = 60 * time.Second

// Options describe one render.
type Options struct {
	// Chart is a chart folder or packaged chart (.tgz).
	Chart string
	// Loaded, when set, is the chart to render instead of loading Chart
	// (Chart then only names it in messages).
	Loaded *chart.Chart
	// Generated says the chart was generated from repository files
	// (package sources): its template names are "templates/<repository
	// path>", and findings name the repository file.
	Generated bool
	// ValuesFiles are merged in order, later files winning.
	ValuesFiles []string
	// ReleaseName and Namespace are the release's; both are required.
	ReleaseName string
	Namespace   string
	// KubeVersion is the Kubernetes version to render for; default
	// DefaultKubeVersion. The cluster the applier installs into should run
	// the same version for the digest to match charts that read it.
	KubeVersion string
	// APIVersions are added to .Capabilities.APIVersions (e.g.
	// "monitoring.coreos.com/v1").
	APIVersions []string
	// Timeout bounds rendering; default DefaultTimeout.
	Timeout time.Duration
	// Previous is what the release's last applied revision rendered
	// (its Result.Rendered: manifests and hooks), for the risk of this
	// change; empty means nothing was applied, so every object is new.
	Previous string
	// Scheme decodes objects strictly; nil means the built-in Kubernetes
	// types of client-go (k8s.io/client-go/kubernetes/scheme), so custom
	// resources and CRDs are skipped with an info finding. Supply a scheme
	// with their types (apiextensions/v1 for CRDs) to check them too.
	Scheme *runtime.Scheme
	// SourcePrefix is joined before chart-relative file names in findings,
	// e.g. the chart's repo-relative path.
	SourcePrefix string
	// Confine, when set, makes every object outside Namespace (another
	// namespace, a cluster-scoped kind, a custom kind of unknown scope)
	// that it does not allow a deny finding (policy helm.namespace),
	// hooks and crds/ included. nil checks nothing (a bare chart lint).
	Confine *Confinement
}

// Object is one rendered Kubernetes object.
type Object struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace is the object's, or the release namespace for a namespaced
	// object that sets none (Helm installs it there).
	Namespace string `json:"namespace,omitempty"`
	// ExplicitNamespace is the metadata.namespace the template wrote.
	ExplicitNamespace string `json:"-"`
	Name              string `json:"name"`
	// Source is the chart-relative template file.
	Source string `json:"source,omitempty"`
	// Hook is set for Helm hooks (covered by the digest through
	// ReleaseDigest).
	Hook bool `json:"hook,omitempty"`
	// CRDFolder is set for CRDs from the chart's crds/ folder (not covered
	// by the digest).
	CRDFolder bool `json:"crdFolder,omitempty"`
	// Object is the whole object, numbers as json.Number.
	Object map[string]any `json:"object"`
}

// ID names the object as Kind/namespace/name (Kind/name when cluster-scoped).
func (o Object) ID() string {
	if o.Namespace == "" {
		return o.Kind + "/" + o.Name
	}
	return o.Kind + "/" + o.Namespace + "/" + o.Name
}

// Result is the outcome of a render.
type Result struct {
	ChartName    string `json:"chartName"`
	ChartVersion string `json:"chartVersion"`
	// Manifest is what Helm hands a post-renderer (the non-hook manifests).
	Manifest string `json:"-"`
	// Rendered is Manifest followed by every hook as a document of its own
	// ("---\n# Source: <file>\n<hook>\n"): everything the release installs
	// or runs, and what the next change is rated against (Options.Previous).
	Rendered string `json:"-"`
	// ManifestDigest is ReleaseDigest of Manifest and the hooks; empty when
	// the chart did not render.
	ManifestDigest string `json:"manifestDigest,omitempty"`
	// Objects are the rendered objects, hooks and crds/ included, for
	// policy input.
	Objects []Object `json:"objects"`
	// Values are the merged, coalesced values (chart defaults included),
	// for policy input. They may hold secrets: never print them.
	Values      map[string]any   `json:"-"`
	Findings    []report.Finding `json:"findings,omitempty"`
	Risk        report.Risk      `json:"risk"`
	RiskReasons []string         `json:"riskReasons,omitempty"`
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// NewClientOnlyInstall returns the action.Install Render uses: DryRun,
// ClientOnly and Replace (as `helm template`), schema validation off (Render
// validates the schema itself, without fetching remote references), the
// Kubernetes and API versions of opts, and pr as post-renderer.
func NewClientOnlyInstall(opts Options, pr postrender.PostRenderer) (*action.Install, error) {
	if err := chartutil.ValidateReleaseName(opts.ReleaseName); err != nil {
		return nil, fmt.Errorf("release name %q: %w", opts.ReleaseName, err)
	}
	if len(opts.Namespace) > 63 || !dnsLabel.MatchString(opts.Namespace) {
		return nil, fmt.Errorf("namespace %q is not a DNS label", opts.Namespace)
	}
	kv, err := parseKubeVersion(opts.KubeVersion)
	if err != nil {
		return nil, err
	}
	inst := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	inst.DryRun = true
	inst.DryRunOption = "client"
	inst.ClientOnly = true
	inst.Replace = true
	inst.ReleaseName = opts.ReleaseName
	inst.Namespace = opts.Namespace
	inst.KubeVersion = kv
	inst.APIVersions = append(chartutil.VersionSet{}, opts.APIVersions...)
	inst.SkipSchemaValidation = true
	inst.DisableOpenAPIValidation = true
	inst.PostRenderer = pr
	return inst, nil
}

// Render checks a chart: values schema, client-only render with the
// manifest digest, strict decoding, template hazards and risk.
func Render(ctx context.Context, opts Options) (*Result, error) {
	if opts.Chart == "" && opts.Loaded == nil {
		return nil, errors.New("helm: no chart given")
	}
	dpr := &DigestPostRenderer{}
	inst, err := NewClientOnlyInstall(opts, dpr)
	if err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	ch := opts.Loaded
	if ch == nil {
		if ch, err = LoadChart(opts.Chart); err != nil {
			return nil, fmt.Errorf("helm: %w", err)
		}
	}
	vals, err := MergeValues(opts.ValuesFiles)
	if err != nil {
		return nil, fmt.Errorf("helm: %w", err)
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}

	r := &Result{ChartName: ch.Name(), ChartVersion: ch.Metadata.Version, Objects: []Object{}, Risk: report.RiskLow}
	c := checker{opts: opts, res: r}

	if err := action.CheckDependencies(ch, ch.Metadata.Dependencies); err != nil {
		c.add(report.SeverityDeny, "helm.dependencies", "", "Chart.yaml", 0, err.Error())
	}
	c.scanTemplates(ch, "")
	if err := chartutil.ProcessDependenciesWithMerge(ch, vals); err != nil {
		c.add(report.SeverityDeny, "helm.dependencies", "", "Chart.yaml", 0, err.Error())
	}
	coalesced, err := chartutil.CoalesceValues(ch, vals)
	if err != nil {
		c.add(report.SeverityDeny, "helm.values", "", "values.yaml", 0, "values cannot be merged with the chart's: "+redact(err.Error()))
	} else {
		r.Values = coalesced
		c.validateSchema(ch, coalesced, "")
	}

	rel, err := renderWithTimeout(ctx, inst, ch, vals, timeout)
	if err != nil {
		r.Risk = report.RiskHigh
		r.RiskReasons = append(r.RiskReasons, "the chart does not render")
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			c.add(report.SeverityDeny, "helm.render", "", "", 0, fmt.Sprintf("rendering did not finish within %s", timeout))
		} else {
			file, line, msg := templateError(err)
			c.add(report.SeverityDeny, "helm.template", "", c.chartFile(file), line, msg)
		}
		return r, nil
	}

	digest, ran := dpr.Digest()
	if !ran {
		// A chart with no manifests at all: Helm still runs the
		// post-renderer on the empty buffer, so this is unexpected.
		return nil, errors.New("helm: the post-renderer did not run")
	}
	r.Manifest = string(dpr.Manifest())
	r.ManifestDigest = ReleaseDigest(dpr.Manifest(), rel.Hooks)
	if len(rel.Hooks) == 0 && r.ManifestDigest != digest {
		return nil, errors.New("helm: the manifest digest differs from the post-renderer's")
	}
	var rendered strings.Builder
	rendered.WriteString(r.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&rendered, "---\n# Source: %s\n%s\n", h.Path, h.Manifest)
	}
	r.Rendered = rendered.String()

	objs, problems := splitManifest(r.Manifest, false)
	for _, h := range rel.Hooks {
		hookObjs, hp := splitDoc(h.Manifest, h.Path, true)
		objs = append(objs, hookObjs...)
		problems = append(problems, hp...)
	}
	crdObjs := c.crdFolder(ch)
	objs = append(objs, crdObjs...)
	for _, p := range problems {
		c.add(report.SeverityDeny, "helm.manifest", "", c.chartFile(p.source), 0, p.msg)
	}
	for i := range objs {
		setNamespace(&objs[i], opts.Namespace)
	}
	r.Objects = objs
	c.confine(objs)
	c.strictDecode(objs)
	c.duplicates(objs)
	c.risk(objs)
	return r, nil
}

// RunWithTimeout runs inst as Render does: Helm's engine takes no
// context, so a render past timeout is abandoned (it finishes on its own)
// and a panic in a template is an error.
func RunWithTimeout(ctx context.Context, inst *action.Install, ch *chart.Chart, vals map[string]any, timeout time.Duration) (*release.Release, error) {
	return renderWithTimeout(ctx, inst, ch, vals, timeout)
}

// renderWithTimeout runs the install in a goroutine, since Helm's engine
// takes no context; on timeout the goroutine is abandoned and finishes on
// its own.
func renderWithTimeout(ctx context.Context, inst *action.Install, ch *chart.Chart, vals map[string]any, timeout time.Duration) (*release.Release, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type out struct {
		rel *release.Release
		err error
	}
	done := make(chan out, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- out{err: fmt.Errorf("rendering failed: %v", p)}
			}
		}()
		rel, err := inst.RunWithContext(ctx, ch, vals)
		done <- out{rel, err}
	}()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case o := <-done:
		return o.rel, o.err
	}
}

// checker accumulates findings for one render.
type checker struct {
	opts Options
	res  *Result
}

func (c *checker) add(sev report.Severity, policy, resource, file string, line int, msg string) {
	c.res.Findings = append(c.res.Findings, report.Finding{
		Severity: sev, Source: "helm", Policy: policy, Resource: resource, File: file, Line: line, Message: msg,
	})
}

// chartFile turns a template name ("mychart/templates/x.yaml",
// "mychart/charts/sub/templates/y.yaml") into a path relative to the chart
// folder, joined to SourcePrefix.
func (c *checker) chartFile(name string) string {
	if name == "" {
		return ""
	}
	if c.opts.Generated {
		return GeneratedSource(name)
	}
	if i := strings.Index(name, "/"); i >= 0 && !strings.HasPrefix(name, "templates/") && !strings.HasPrefix(name, "charts/") &&
		name != "Chart.yaml" && name != "values.yaml" && name != "values.schema.json" && !strings.HasPrefix(name, "crds/") {
		name = name[i+1:]
	}
	if c.opts.SourcePrefix == "" {
		return name
	}
	return path.Join(c.opts.SourcePrefix, name)
}

// GeneratedSource turns a template name of a generated chart
// ("<chart>/templates/<path>" or "templates/<path>") into the repository
// file it holds.
func GeneratedSource(name string) string {
	if !strings.HasPrefix(name, "templates/") {
		if _, rest, ok := strings.Cut(name, "/"); ok {
			name = rest
		}
	}
	return strings.TrimPrefix(name, "templates/")
}

var (
	reAt      = regexp.MustCompile(`(?:parse|execution) error at \(([^()\s]+?):(\d+)(?::\d+)?\): (.*)`)
	reIn      = regexp.MustCompile(`(?:parse|execution) error in \(([^()\s]+)\): (.*)`)
	reTmpl    = regexp.MustCompile(`template: ([^\s:]+):(\d+)(?::\d+)?: (.*)`)
	reYAML    = regexp.MustCompile(`YAML parse error on ([^\s:]+): (.*)`)
	reParsing = regexp.MustCompile(`parsing "[^"]*"`)
)

// templateError extracts the template file, line and message from a Helm
// render error.
func templateError(err error) (file string, line int, msg string) {
	s := strings.TrimSpace(err.Error())
	if m := reAt.FindStringSubmatch(s); m != nil {
		fmt.Sscanf(m[2], "%d", &line)
		return m[1], line, redact(m[3])
	}
	if m := reTmpl.FindStringSubmatch(s); m != nil {
		fmt.Sscanf(m[2], "%d", &line)
		return m[1], line, redact(m[3])
	}
	if m := reIn.FindStringSubmatch(s); m != nil {
		return m[1], 0, redact(m[2])
	}
	if m := reYAML.FindStringSubmatch(s); m != nil {
		return m[1], 0, "the rendered output is not valid YAML: " + redact(m[2])
	}
	return "", 0, redact(s)
}

// redact drops quoted input that conversion errors echo (strconv's
// `parsing "value"`), which may be a secret from the values.
func redact(s string) string {
	return reParsing.ReplaceAllString(s, `parsing (value redacted)`)
}
