package changespec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	yaml "go.yaml.in/yaml/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// Checks users already have. A verification block in service.yaml may
// list, under `templates`, documents of the service folder that another
// tool reads: an Argo Rollouts AnalysisTemplate (or
// ClusterAnalysisTemplate) with the Prometheus provider, or a Flagger
// MetricTemplate of type prometheus. Each is read as it is and converted
// to Sluice checks when the change is built, so the checks the change
// carries (and its approvalDigest) are what the documents said at that
// revision; the documents are in the service folder, so changing one is
// a change of the service.
//
//	verification:
//	  templates:
//	    - analysisTemplate: analysis/success-rate.yaml
//	      args: {service-name: "{{ .Release }}"}
//	    - metricTemplate: analysis/error-rate.yaml
//	      interval: 1m
//	      count: 3
//	      thresholdRange: {max: 1}
//
// Argument values (args, variables, target) are Sluice query templates:
// they may use {{ .Release }}, {{ .Namespace }}, {{ .Revision }} and
// {{ .AppliedAt }}. The documents' own text is taken literally.

// TemplateRef is one entry of a verification block's templates.
type TemplateRef struct {
	// AnalysisTemplate is the path of an Argo Rollouts AnalysisTemplate,
	// relative to the service folder.
	AnalysisTemplate string `json:"analysisTemplate,omitempty"`
	// MetricTemplate is the path of a Flagger MetricTemplate, relative to
	// the service folder.
	MetricTemplate string `json:"metricTemplate,omitempty"`
	// Args are the AnalysisTemplate's arguments by name (they override
	// the template's values).
	Args map[string]string `json:"args,omitempty"`

	// Name names the MetricTemplate's check (its metadata.name by
	// default).
	Name string `json:"name,omitempty"`
	// Interval, Count and FailureLimit are the MetricTemplate check's
	// (Flagger keeps them on the Canary): 1m, 1 and 0 by default. Count
	// is also the count of an AnalysisTemplate's metrics that have an
	// interval and no count (Argo Rollouts measures those until the
	// rollout ends).
	Interval     string `json:"interval,omitempty"`
	Count        int32  `json:"count,omitempty"`
	FailureLimit int32  `json:"failureLimit,omitempty"`
	// ThresholdRange is the accepted range of the MetricTemplate's value,
	// as on a Flagger Canary.
	ThresholdRange *ThresholdRange `json:"thresholdRange,omitempty"`
	// Target is {{ target }} (and {{ name }}, {{ service }}) of a
	// MetricTemplate; the Release's name by default.
	Target string `json:"target,omitempty"`
	// Variables are a MetricTemplate's {{ variables.x }}.
	Variables map[string]string `json:"variables,omitempty"`

	// NoData is the converted checks' rule for no data (fail by default).
	NoData sluicev1.NoDataPolicy `json:"noData,omitempty"`
}

// ThresholdRange is Flagger's accepted range.
type ThresholdRange struct {
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
}

// maxTemplateSize bounds a template document.
const maxTemplateSize = 256 << 10

// templateChecks reads and converts the templates of a verification
// block; addresses are the Prometheus addresses the documents name, one
// of which is used when the verification sets none.
func templateChecks(files fs.FS, serviceDir string, refs []TemplateRef) (checks []sluicev1.MetricCheck, addresses []string, err error) {
	for i, ref := range refs {
		var got []sluicev1.MetricCheck
		var addr string
		switch {
		case (ref.AnalysisTemplate == "") == (ref.MetricTemplate == ""):
			err = errors.New("needs exactly one of analysisTemplate or metricTemplate")
		case ref.AnalysisTemplate != "":
			var doc []byte
			if doc, err = readTemplate(files, serviceDir, ref.AnalysisTemplate); err == nil {
				got, addr, err = ConvertAnalysisTemplate(doc, ref)
			}
		default:
			var doc []byte
			if doc, err = readTemplate(files, serviceDir, ref.MetricTemplate); err == nil {
				got, addr, err = ConvertMetricTemplate(doc, ref)
			}
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%w: templates[%d] (%s): %v", sluicev1.ErrInvalidVerification, i, ref.AnalysisTemplate+ref.MetricTemplate, err)
		}
		if addr != "" && !slices.Contains(addresses, addr) {
			addresses = append(addresses, addr)
		}
		checks = append(checks, got...)
	}
	return checks, addresses, nil
}

// readTemplate reads a template document at rel inside the service
// folder; a path leaving it is refused.
func readTemplate(files fs.FS, serviceDir, rel string) ([]byte, error) {
	if files == nil {
		return nil, errors.New("the repository's files are not available to read it")
	}
	if strings.Contains(rel, `\`) || path.IsAbs(rel) || !fs.ValidPath(rel) || rel == "." {
		return nil, fmt.Errorf("path %q must be a file inside the service folder (relative, no ..)", rel)
	}
	p := path.Join(serviceDir, rel)
	if !fs.ValidPath(p) {
		return nil, fmt.Errorf("path %q must be a file inside the service folder", rel)
	}
	f, err := files.Open(p)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", p)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTemplateSize+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", p, err)
	}
	if len(b) > maxTemplateSize {
		return nil, fmt.Errorf("%s is larger than %d KiB", p, maxTemplateSize>>10)
	}
	return b, nil
}

// decodeDocument decodes one YAML document into out (through JSON, so
// the types' json tags apply; fields Sluice does not read are left out)
// and returns its apiVersion and kind.
func decodeDocument(doc []byte, out any) (apiVersion, kind string, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(doc))
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		return "", "", fmt.Errorf("not a YAML document: %v", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return "", "", errors.New("holds more than one YAML document; put one template in each file")
	}
	b, err := json.Marshal(m)
	if err != nil {
		return "", "", fmt.Errorf("not a template document: %v", err)
	}
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(b, &head); err != nil {
		return "", "", fmt.Errorf("apiVersion and kind must be strings: %v", err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		return "", "", fmt.Errorf("%s: %v", head.Kind, err)
	}
	return head.APIVersion, head.Kind, nil
}

// analysisTemplate is the part of an Argo Rollouts AnalysisTemplate
// Sluice reads.
type analysisTemplate struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Args []struct {
			Name      string          `json:"name"`
			Value     *string         `json:"value"`
			ValueFrom json.RawMessage `json:"valueFrom"`
		} `json:"args"`
		Metrics []analysisMetric `json:"metrics"`
		DryRun  []struct {
			MetricName string `json:"metricName"`
		} `json:"dryRun"`
	} `json:"spec"`
}

type analysisMetric struct {
	Name              string                     `json:"name"`
	Interval          string                     `json:"interval"`
	InitialDelay      string                     `json:"initialDelay"`
	Count             json.RawMessage            `json:"count"`
	FailureLimit      json.RawMessage            `json:"failureLimit"`
	InconclusiveLimit json.RawMessage            `json:"inconclusiveLimit"`
	SuccessCondition  string                     `json:"successCondition"`
	FailureCondition  string                     `json:"failureCondition"`
	Provider          map[string]json.RawMessage `json:"provider"`
}

type prometheusProvider struct {
	Address        string          `json:"address"`
	Query          string          `json:"query"`
	Authentication json.RawMessage `json:"authentication"`
	Headers        json.RawMessage `json:"headers"`
}

// argoTag is one {{ ... }} of an Argo Rollouts template.
var argoTag = regexp.MustCompile(`\{\{\s*([^{}]*?)\s*\}\}`)

// ConvertAnalysisTemplate converts an Argo Rollouts AnalysisTemplate
// (or ClusterAnalysisTemplate) with the Prometheus provider to checks:
// {{args.x}} is filled from ref's args or the template's values; a
// condition is `result[0] <op> number` (or result, joined by && or ||);
// interval, count, failureLimit and inconclusiveLimit carry over;
// dry-run metrics, which never decide in Argo Rollouts, are left out.
// Anything Sluice cannot run the same way is an error naming it.
func ConvertAnalysisTemplate(doc []byte, ref TemplateRef) ([]sluicev1.MetricCheck, string, error) {
	var t analysisTemplate
	apiVersion, kind, err := decodeDocument(doc, &t)
	if err != nil {
		return nil, "", err
	}
	if !strings.HasPrefix(apiVersion, "argoproj.io/") || (kind != "AnalysisTemplate" && kind != "ClusterAnalysisTemplate") {
		return nil, "", fmt.Errorf("is %s %s, not an Argo Rollouts AnalysisTemplate (argoproj.io/v1alpha1)", apiVersion, kind)
	}
	args := map[string]argValue{}
	for _, a := range t.Spec.Args {
		if v, ok := ref.Args[a.Name]; ok {
			args[a.Name] = argValue{value: v, sluice: true}
			continue
		}
		switch {
		case a.Value != nil:
			args[a.Name] = argValue{value: *a.Value}
		case len(a.ValueFrom) > 0:
			return nil, "", fmt.Errorf("arg %s takes its value from the cluster (valueFrom); give it in args", a.Name)
		default:
			return nil, "", fmt.Errorf("arg %s has no value; give it in args", a.Name)
		}
	}
	for name := range ref.Args {
		if _, ok := args[name]; !ok {
			return nil, "", fmt.Errorf("args has %s, which the template does not declare", name)
		}
	}
	dry := map[string]bool{}
	for _, d := range t.Spec.DryRun {
		dry[d.MetricName] = true
	}
	if len(t.Spec.Metrics) == 0 {
		return nil, "", errors.New("has no metrics")
	}
	var checks []sluicev1.MetricCheck
	address := ""
	for _, m := range t.Spec.Metrics {
		if dry[m.Name] || dry["*"] {
			continue
		}
		c, addr, err := convertAnalysisMetric(m, args, ref.NoData, ref.Count)
		if err != nil {
			return nil, "", fmt.Errorf("metric %s: %v", m.Name, err)
		}
		if addr != "" && address != "" && addr != address {
			return nil, "", fmt.Errorf("metric %s: Prometheus address %q differs from %q of another metric", m.Name, addr, address)
		}
		if addr != "" {
			address = addr
		}
		checks = append(checks, c)
	}
	return checks, address, nil
}

func convertAnalysisMetric(m analysisMetric, args map[string]argValue, noData sluicev1.NoDataPolicy, count int32) (sluicev1.MetricCheck, string, error) {
	c := sluicev1.MetricCheck{Name: m.Name, NoData: noData}
	if len(m.Provider) != 1 || m.Provider["prometheus"] == nil {
		names := make([]string, 0, len(m.Provider))
		for n := range m.Provider {
			names = append(names, n)
		}
		return c, "", fmt.Errorf("provider %s is not supported; Sluice reads the prometheus provider only", strings.Join(names, ", "))
	}
	var p prometheusProvider
	if err := json.Unmarshal(m.Provider["prometheus"], &p); err != nil {
		return c, "", fmt.Errorf("provider prometheus: %v", err)
	}
	if len(p.Authentication) > 0 || len(p.Headers) > 0 {
		return c, "", errors.New("provider prometheus: authentication and headers are not supported; Sluice queries its own prometheusURL")
	}
	if m.InitialDelay != "" {
		return c, "", errors.New("initialDelay is not supported; use the verification's soakTime or a longer interval")
	}
	var err error
	if c.Query, err = substituteArgs("query", p.Query, args, true); err != nil {
		return c, "", err
	}
	sub := func(field, s string) (string, error) { return substituteArgs(field, s, args, false) }
	if strings.TrimSpace(p.Query) == "" {
		return c, "", errors.New("provider prometheus has no query")
	}
	address, err := sub("address", p.Address)
	if err != nil {
		return c, "", err
	}
	for _, cond := range []struct {
		field, text string
		into        *string
	}{{"successCondition", m.SuccessCondition, &c.SuccessCondition}, {"failureCondition", m.FailureCondition, &c.FailureCondition}} {
		if cond.text == "" {
			continue
		}
		text, err := sub(cond.field, cond.text)
		if err != nil {
			return c, "", err
		}
		if *cond.into, err = argoCondition(text); err != nil {
			return c, "", fmt.Errorf("%s: %v", cond.field, err)
		}
	}
	if m.Interval != "" {
		iv, err := sub("interval", m.Interval)
		if err != nil {
			return c, "", err
		}
		d, err := time.ParseDuration(iv)
		if err != nil || d <= 0 {
			return c, "", fmt.Errorf("interval %q is not a duration", m.Interval)
		}
		c.Interval = &metav1.Duration{Duration: d}
	}
	for _, n := range []struct {
		field string
		raw   json.RawMessage
		into  *int32
	}{{"count", m.Count, &c.Count}, {"failureLimit", m.FailureLimit, &c.FailureLimit}, {"inconclusiveLimit", m.InconclusiveLimit, &c.InconclusiveLimit}} {
		if len(n.raw) == 0 {
			continue
		}
		v, err := intOrString(n.raw, func(s string) (string, error) { return sub(n.field, s) })
		if err != nil {
			return c, "", fmt.Errorf("%s: %v", n.field, err)
		}
		if v < 0 {
			return c, "", fmt.Errorf("%s %d: Sluice needs a limit of 0 or more", n.field, v)
		}
		*n.into = v
	}
	if len(m.Count) == 0 && c.Interval != nil {
		if count <= 0 {
			return c, "", errors.New("has an interval but no count: Argo Rollouts measures it until the rollout ends, a Sluice verification ends; give count in the template's entry in service.yaml")
		}
		c.Count = count
	}
	return c, address, nil
}

// argValue is an AnalysisTemplate argument's value: from service.yaml (a
// Sluice query template) or the document's default (literal text).
type argValue struct {
	value  string
	sluice bool
}

// substituteArgs fills Argo Rollouts' {{args.x}} in s. For the query
// (query true) the result is a Sluice query template: the document's
// text is escaped, service.yaml's values are put in as they are. A tag
// that is not a declared arg is an error.
func substituteArgs(field, s string, args map[string]argValue, query bool) (string, error) {
	var b strings.Builder
	last := 0
	lit := func(t string) {
		if query {
			t = escapeTemplate(t)
		}
		b.WriteString(t)
	}
	for _, m := range argoTag.FindAllStringSubmatchIndex(s, -1) {
		lit(s[last:m[0]])
		last = m[1]
		name := s[m[2]:m[3]]
		arg, ok := strings.CutPrefix(name, "args.")
		v, found := args[arg]
		if !ok || !found {
			return "", fmt.Errorf("%s uses {{%s}}, which is not a declared arg", field, name)
		}
		if v.sluice || !query {
			b.WriteString(v.value)
		} else {
			lit(v.value)
		}
	}
	lit(s[last:])
	return b.String(), nil
}

// argoCondition converts an Argo Rollouts condition (an expr expression)
// to Sluice's: result[0] becomes result; what is left must be
// comparisons of result with numbers, joined by && or ||.
func argoCondition(s string) (string, error) {
	out := strings.ReplaceAll(s, "result[0]", "result")
	out = strings.Join(strings.Fields(out), " ")
	if _, err := sluicev1.ParseCondition(out); err != nil {
		return "", fmt.Errorf("%q: Sluice reads comparisons of result[0] with numbers, joined by && or || (%v)", s, err)
	}
	return out, nil
}

// intOrString reads an Argo Rollouts IntOrString field (a number, or a
// string that may use args).
func intOrString(raw json.RawMessage, sub func(string) (string, error)) (int32, error) {
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil {
		if n > 1<<30 || n < -1<<30 {
			return 0, fmt.Errorf("%d is out of range", n)
		}
		return int32(n), nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("%s is not a number", raw)
	}
	s, err := sub(s)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(strings.TrimSpace(s), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	return int32(v), nil
}

// metricTemplate is the part of a Flagger MetricTemplate Sluice reads.
type metricTemplate struct {
	Metadata struct {
		Name string `json:"name"`
	} `json:"metadata"`
	Spec struct {
		Provider struct {
			Type               string          `json:"type"`
			Address            string          `json:"address"`
			SecretRef          json.RawMessage `json:"secretRef"`
			InsecureSkipVerify bool            `json:"insecureSkipVerify"`
		} `json:"provider"`
		Query string `json:"query"`
	} `json:"spec"`
}

// ConvertMetricTemplate converts a Flagger MetricTemplate of type
// prometheus to one check: its query with Flagger's variables filled
// ({{ namespace }} the target namespace, {{ name }}, {{ target }} and
// {{ service }} ref.Target or the Release, {{ interval }} the interval,
// {{ variables.x }} ref.Variables), and ref's thresholdRange as the
// success condition.
func ConvertMetricTemplate(doc []byte, ref TemplateRef) ([]sluicev1.MetricCheck, string, error) {
	var t metricTemplate
	apiVersion, kind, err := decodeDocument(doc, &t)
	if err != nil {
		return nil, "", err
	}
	if !strings.HasPrefix(apiVersion, "flagger.app/") || kind != "MetricTemplate" {
		return nil, "", fmt.Errorf("is %s %s, not a Flagger MetricTemplate (flagger.app/v1beta1)", apiVersion, kind)
	}
	p := t.Spec.Provider
	switch {
	case p.Type != "prometheus":
		return nil, "", fmt.Errorf("provider type %q is not supported; Sluice reads the prometheus provider only", p.Type)
	case len(p.SecretRef) > 0:
		return nil, "", errors.New("provider secretRef is not supported; Sluice queries its own prometheusURL")
	case p.InsecureSkipVerify:
		return nil, "", errors.New("provider insecureSkipVerify is not supported")
	case strings.TrimSpace(t.Spec.Query) == "":
		return nil, "", errors.New("has no query")
	}
	name := ref.Name
	if name == "" {
		name = t.Metadata.Name
	}
	c := sluicev1.MetricCheck{Name: name, Count: ref.Count, FailureLimit: ref.FailureLimit, NoData: ref.NoData}
	interval := time.Minute
	if ref.Interval != "" {
		if interval, err = time.ParseDuration(ref.Interval); err != nil || interval <= 0 {
			return nil, "", fmt.Errorf("interval %q is not a duration", ref.Interval)
		}
	}
	c.Interval = &metav1.Duration{Duration: interval}
	target := ref.Target
	if target == "" {
		target = "{{ .Release }}"
	}
	literal := func(s string) func() string { return func() string { return s } }
	funcs := template.FuncMap{
		"name": literal(target), "target": literal(target), "service": literal(target),
		"namespace": literal("{{ .Namespace }}"), "interval": literal(promDuration(interval)),
		"ingress":   func() (string, error) { return "", errors.New("{{ ingress }} has no value in Sluice; use a variable") },
		"variables": func() map[string]string { return ref.Variables },
	}
	tmpl, err := template.New(name).Option("missingkey=error").Funcs(funcs).Parse(t.Spec.Query)
	if err != nil {
		return nil, "", fmt.Errorf("query: %v", err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, nil); err != nil {
		return nil, "", fmt.Errorf("query: %v", err)
	}
	c.Query = b.String()
	r := ref.ThresholdRange
	switch {
	case r == nil || (r.Min == nil && r.Max == nil):
		return nil, "", errors.New("thresholdRange needs min or max (the accepted range, as on the Flagger Canary)")
	case r.Min != nil && r.Max != nil:
		c.SuccessCondition = fmt.Sprintf("result >= %s && result <= %s", num(*r.Min), num(*r.Max))
	case r.Min != nil:
		c.SuccessCondition = "result >= " + num(*r.Min)
	default:
		c.SuccessCondition = "result <= " + num(*r.Max)
	}
	return []sluicev1.MetricCheck{c}, p.Address, nil
}

// escapeTemplate makes s literal text of a Sluice query template.
func escapeTemplate(s string) string {
	return strings.ReplaceAll(s, "{{", `{{"{{"}}`)
}

// promDuration writes d as a Prometheus duration (1m, 30s, 1500ms).
func promDuration(d time.Duration) string {
	for _, u := range []struct {
		unit string
		d    time.Duration
	}{{"h", time.Hour}, {"m", time.Minute}, {"s", time.Second}} {
		if d%u.d == 0 {
			return strconv.FormatInt(int64(d/u.d), 10) + u.unit
		}
	}
	return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
