package helmcheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"sync"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/release"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

type docProblem struct {
	source, msg string
}

var (
	reDocSep = regexp.MustCompile(`(?m)^---[ \t]*$`)
	reSource = regexp.MustCompile(`^# Source: (.+)$`)
)

// ParseManifest splits a rendered manifest (as Helm writes it, or a
// release's stored manifest) into objects. It is what Render uses on the
// digested bytes, and what a caller uses on a previous manifest.
func ParseManifest(manifest string) ([]Object, error) {
	objs, problems := splitManifest(manifest, false)
	if len(problems) > 0 {
		return objs, fmt.Errorf("%s: %s", problems[0].source, problems[0].msg)
	}
	return objs, nil
}

func splitManifest(manifest string, hook bool) ([]Object, []docProblem) {
	var objs []Object
	var problems []docProblem
	for _, doc := range reDocSep.Split(manifest, -1) {
		source := ""
		trimmed := strings.TrimLeft(doc, "\n")
		if first, _, _ := strings.Cut(trimmed, "\n"); reSource.MatchString(first) {
			source = reSource.FindStringSubmatch(first)[1]
		}
		o, p := splitDoc(doc, source, hook)
		objs = append(objs, o...)
		problems = append(problems, p...)
	}
	return objs, problems
}

// splitDoc parses one YAML document (a hook may hold several).
func splitDoc(doc, source string, hook bool) ([]Object, []docProblem) {
	var objs []Object
	var problems []docProblem
	for _, part := range reDocSep.Split(doc, -1) {
		if isBlank(part) {
			continue
		}
		js, err := yaml.YAMLToJSON([]byte(part))
		if err != nil {
			problems = append(problems, docProblem{source, "not valid YAML: " + err.Error()})
			continue
		}
		if bytes.Equal(bytes.TrimSpace(js), []byte("null")) {
			continue
		}
		dec := json.NewDecoder(bytes.NewReader(js))
		dec.UseNumber()
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			problems = append(problems, docProblem{source, "not a YAML mapping"})
			continue
		}
		o := Object{Source: source, Hook: hook, Object: m}
		o.APIVersion, _ = m["apiVersion"].(string)
		o.Kind, _ = m["kind"].(string)
		if md, ok := m["metadata"].(map[string]any); ok {
			o.Name, _ = md["name"].(string)
			o.Namespace, _ = md["namespace"].(string)
			o.ExplicitNamespace = o.Namespace
			if ann, ok := md["annotations"].(map[string]any); ok {
				// Helm makes an object with this annotation a hook (or
				// drops it, for an unknown hook event); a stored
				// manifest with hooks appended (Result.Rendered) is
				// read back the same way.
				if _, isHook := ann[release.HookAnnotation]; isHook {
					o.Hook = true
				}
			}
		}
		if o.APIVersion == "" || o.Kind == "" {
			problems = append(problems, docProblem{source, "an object without apiVersion or kind"})
			continue
		}
		objs = append(objs, o)
	}
	return objs, problems
}

// isBlank reports whether a document holds only whitespace and comments.
func isBlank(doc string) bool {
	for _, line := range strings.Split(doc, "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") {
			return false
		}
	}
	return true
}

// setNamespace sets the namespace Helm installs o into: none for a
// cluster-scoped kind, the release namespace for any other object that
// names none (a custom kind of unknown scope is named as if namespaced;
// confine refuses it unless allowed).
func setNamespace(o *Object, ns string) {
	gv, _ := schema.ParseGroupVersion(o.APIVersion)
	if KindScope(schema.GroupKind{Group: gv.Group, Kind: o.Kind}) == ScopeCluster {
		o.Namespace = ""
		return
	}
	if o.Namespace == "" {
		o.Namespace = ns
	}
}

func (c *checker) crdFolder(ch *chart.Chart) []Object {
	var out []Object
	for _, crd := range ch.CRDObjects() {
		objs, problems := splitDoc(string(crd.File.Data), crd.Filename, false)
		for i := range objs {
			objs[i].CRDFolder = true
		}
		out = append(out, objs...)
		for _, p := range problems {
			c.add(report.SeverityDeny, "helm.manifest", "", c.chartFile(p.source), 0, p.msg)
		}
	}
	if len(out) > 0 {
		c.add(report.SeverityWarn, "helm.crds_not_digested", "", c.chartFile("crds"), 0,
			fmt.Sprintf("the chart installs %d CRDs from crds/; Helm does not pass them to post-renderers, so manifestDigest does not cover them (and Helm never upgrades them)", len(out)))
	}
	return out
}

// defaultScheme holds the built-in Kubernetes types of client-go, and
// nothing else: client-go's global scheme.Scheme also gets whatever imported
// packages register (Helm adds apiextensions), which would make the
// default depend on imports.
var defaultScheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	if err := scheme.AddToScheme(s); err != nil {
		panic(fmt.Sprintf("client-go scheme: %v", err)) // static registration; cannot fail at run time
	}
	return s
})

// strictDecode decodes every object with unknown and duplicate fields as
// errors. Kinds the scheme does not know (custom resources, CRDs unless the
// scheme has apiextensions) are skipped with an info finding.
func (c *checker) strictDecode(objs []Object) {
	sch := c.opts.Scheme
	if sch == nil {
		sch = defaultScheme()
	}
	for _, o := range objs {
		gv, err := schema.ParseGroupVersion(o.APIVersion)
		if err != nil {
			c.add(report.SeverityDeny, "helm.strict_decode", o.ID(), c.chartFile(o.Source), 0,
				fmt.Sprintf("apiVersion %q is not valid", o.APIVersion))
			continue
		}
		gvk := gv.WithKind(o.Kind)
		if !sch.Recognizes(gvk) {
			what := "a kind the Kubernetes scheme does not know (custom resource?)"
			if o.Kind == "CustomResourceDefinition" {
				what = "a CustomResourceDefinition"
			}
			c.add(report.SeverityInfo, "helm.strict_decode", o.ID(), c.chartFile(o.Source), 0,
				fmt.Sprintf("not checked against a schema: %s %s is %s", gvk.GroupVersion(), o.Kind, what))
			continue
		}
		data, err := json.Marshal(o.Object)
		if err != nil {
			c.add(report.SeverityDeny, "helm.strict_decode", o.ID(), c.chartFile(o.Source), 0, "cannot encode the object: "+err.Error())
			continue
		}
		typed, err := sch.New(gvk)
		if err != nil {
			c.add(report.SeverityInfo, "helm.strict_decode", o.ID(), c.chartFile(o.Source), 0,
				fmt.Sprintf("not checked against a schema: %s", err))
			continue
		}
		// Unknown and duplicate fields come back as strict errors, a wrong
		// type as err; report both, so one problem does not hide another.
		strictErrs, err := sigsjson.UnmarshalStrict(data, typed, sigsjson.DisallowUnknownFields, sigsjson.DisallowDuplicateFields)
		for _, e := range strictErrs {
			c.add(report.SeverityDeny, "helm.strict_decode", o.ID(), c.chartFile(o.Source), 0, e.Error())
		}
		if err != nil {
			c.add(report.SeverityDeny, "helm.strict_decode", o.ID(), c.chartFile(o.Source), 0, redact(err.Error()))
			var unknown []string
			unknownFields(o.Object, reflect.TypeOf(typed), "", &unknown)
			sort.Strings(unknown)
			for _, f := range unknown {
				c.add(report.SeverityDeny, "helm.strict_decode", o.ID(), c.chartFile(o.Source), 0, fmt.Sprintf("unknown field %q", f))
			}
		}
	}
}

// duplicates reports objects rendered twice; Helm would refuse to install.
func (c *checker) duplicates(objs []Object) {
	seen := map[string]bool{}
	for _, o := range objs {
		if o.Hook {
			continue
		}
		id := groupOf(o.APIVersion) + "/" + o.ID()
		if seen[id] {
			c.add(report.SeverityDeny, "helm.duplicate", o.ID(), c.chartFile(o.Source), 0, "the object is rendered more than once")
		}
		seen[id] = true
	}
}

func groupOf(apiVersion string) string {
	if g, _, ok := strings.Cut(apiVersion, "/"); ok {
		return g
	}
	return ""
}
