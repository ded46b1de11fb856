package changespec

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The documents below have the shapes of the projects' own examples:
// Argo Rollouts' success-rate AnalysisTemplate (docs "Analysis &
// Progressive Delivery") and Flagger's not-found-percentage
// MetricTemplate (docs "Metrics Analysis").

const argoSuccessRate = `apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata:
  name: success-rate
spec:
  args:
  - name: service-name
  - name: window
    value: 5m
  - name: checks
    value: "3"
  metrics:
  - name: success-rate
    interval: 5m
    # NOTE: prometheus queries return results in the form of a vector.
    # So it is common to access the index 0 of the returned array to obtain the value
    successCondition: result[0] >= 0.95
    failureLimit: 3
    provider:
      prometheus:
        address: http://prometheus.example.com:9090
        query: |
          sum(irate(
            istio_requests_total{reporter="source",destination_service=~"{{args.service-name}}",response_code!~"5.*"}[{{ args.window }}]
          )) /
          sum(irate(
            istio_requests_total{reporter="source",destination_service=~"{{args.service-name}}"}[{{ args.window }}]
          ))
  - name: error-count
    count: "{{args.checks}}"
    interval: 30s
    failureCondition: result[0] > 10 || result[0] < 0
    successCondition: result[0] <= 10
    inconclusiveLimit: 1
    provider:
      prometheus:
        address: http://prometheus.example.com:9090
        query: sum(increase(app_errors_total{service="{{args.service-name}}"}[1m]))
  - name: web-check
    provider:
      web:
        url: http://example.com/
  dryRun:
  - metricName: web-check
`

const flaggerNotFound = `apiVersion: flagger.app/v1beta1
kind: MetricTemplate
metadata:
  name: not-found-percentage
  namespace: istio-system
spec:
  provider:
    type: prometheus
    address: http://prometheus.istio-system:9090
  query: |
    100 - sum(
        rate(
            istio_requests_total{
              reporter="destination",
              destination_workload_namespace="{{ namespace }}",
              destination_workload="{{ target }}",
              response_code!="404"
            }[{{ interval }}]
        )
    )
    /
    sum(
        rate(
            istio_requests_total{
              reporter="destination",
              destination_workload_namespace="{{ namespace }}",
              destination_workload="{{ target }}"
            }[{{ interval }}]
        )
    ) * 100
`

// An AnalysisTemplate is read as it is: args filled (service.yaml's
// values are Sluice templates, the document's defaults literal),
// result[0] read as result, interval, count, failureLimit and
// inconclusiveLimit carried over, the dry-run metric left out.
func TestConvertAnalysisTemplate_argoExample(t *testing.T) {
	checks, addr, err := ConvertAnalysisTemplate([]byte(strings.Replace(argoSuccessRate, `"{{args.checks}}"`, "3", 1)),
		TemplateRef{Args: map[string]string{"service-name": "{{ .Release }}.{{ .Namespace }}.svc.cluster.local"}, Count: 4})
	if err != nil {
		t.Fatal(err)
	}
	if addr != "http://prometheus.example.com:9090" || len(checks) != 2 {
		t.Fatalf("address %q, checks %+v", addr, checks)
	}
	sr, ec := checks[0], checks[1]
	if sr.Name != "success-rate" || sr.SuccessCondition != "result >= 0.95" || sr.Interval.Duration != 5*time.Minute || sr.Count != 4 || sr.FailureLimit != 3 {
		t.Fatalf("success-rate = %+v", sr)
	}
	q, err := sluicev1.RenderQuery(sr.Query, sluicev1.QueryData{Release: "web-prod", Namespace: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(q, `destination_service=~"web-prod.web.svc.cluster.local",response_code!~"5.*"}[5m]`) {
		t.Fatalf("query = %s", q)
	}
	if ec.Count != 3 || ec.InconclusiveLimit != 1 || ec.FailureCondition != "result > 10 || result < 0" || ec.SuccessCondition != "result <= 10" {
		t.Fatalf("error-count = %+v", ec)
	}
}

// A template's {{ in a default value stays literal text: it cannot
// reach Sluice's template fields.
func TestConvertAnalysisTemplate_defaultsAreLiteral(t *testing.T) {
	doc := `apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
spec:
  args: [{name: x, value: "{{ .Revision }}"}]
  metrics:
  - name: m
    successCondition: result[0] < 1
    provider: {prometheus: {query: 'up{x="{{args.x}}"}'}}
`
	checks, _, err := ConvertAnalysisTemplate([]byte(doc), TemplateRef{})
	if err != nil {
		t.Fatal(err)
	}
	q, err := sluicev1.RenderQuery(checks[0].Query, sluicev1.QueryData{Revision: "abc"})
	if err != nil || q != `up{x="{{ .Revision }}"}` {
		t.Fatalf("query = %q, %v", q, err)
	}
}

// A MetricTemplate: Flagger's variables filled (namespace and target
// from the release unless given), the interval as a Prometheus duration,
// thresholdRange as the success condition.
func TestConvertMetricTemplate_flaggerExample(t *testing.T) {
	max := 5.0
	checks, addr, err := ConvertMetricTemplate([]byte(flaggerNotFound), TemplateRef{Interval: "90s", Count: 3, FailureLimit: 1, ThresholdRange: &ThresholdRange{Max: &max}})
	if err != nil {
		t.Fatal(err)
	}
	c := checks[0]
	if addr != "http://prometheus.istio-system:9090" || c.Name != "not-found-percentage" || c.SuccessCondition != "result <= 5" || c.Count != 3 || c.FailureLimit != 1 || c.Interval.Duration != 90*time.Second {
		t.Fatalf("address %q, check %+v", addr, c)
	}
	q, err := sluicev1.RenderQuery(c.Query, sluicev1.QueryData{Release: "web-prod", Namespace: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(q, `destination_workload_namespace="web",`) || !strings.Contains(q, `destination_workload="web-prod",`) || !strings.Contains(q, "}[90s]") {
		t.Fatalf("query = %s", q)
	}
	min := 1.0
	checks, _, err = ConvertMetricTemplate([]byte(strings.Replace(flaggerNotFound, `"{{ target }}"`, `"{{ variables.workload }}"`, 1)),
		TemplateRef{Name: "nf", Target: "web", ThresholdRange: &ThresholdRange{Min: &min, Max: &max}, Variables: map[string]string{"workload": "web-primary"}})
	if err != nil {
		t.Fatal(err)
	}
	if c := checks[0]; c.Name != "nf" || c.SuccessCondition != "result >= 1 && result <= 5" || !strings.Contains(c.Query, `destination_workload="web-primary"`) || !strings.Contains(c.Query, `destination_workload="web"`) || !strings.Contains(c.Query, "[1m]") {
		t.Fatalf("check = %+v", c)
	}
}

// Bad input is an error naming what is wrong, never a check that
// silently does something else.
func TestConvertTemplates_badInput(t *testing.T) {
	max := 1.0
	argo := func(old, new string) string { return strings.Replace(argoSuccessRate, old, new, 1) }
	withArgs := TemplateRef{Args: map[string]string{"service-name": "web"}, Count: 2}
	tests := map[string]struct {
		doc, want string
		ref       TemplateRef
		flagger   bool
	}{
		"an unknown provider":          {doc: argo("dryRun:\n  - metricName: web-check\n", ""), ref: withArgs, want: "metric web-check: provider web is not supported"},
		"a template arg missing":       {doc: argoSuccessRate, ref: TemplateRef{Count: 2}, want: "arg service-name has no value"},
		"an arg from a secret":         {doc: argo("- name: service-name\n", "- name: service-name\n    valueFrom: {secretKeyRef: {name: s, key: k}}\n"), ref: TemplateRef{Count: 2}, want: "valueFrom"},
		"an undeclared arg used":       {doc: argo("{{args.checks}}", "{{args.nope}}"), ref: withArgs, want: "{{args.nope}}, which is not a declared arg"},
		"an arg given, not declared":   {doc: argoSuccessRate, ref: TemplateRef{Args: map[string]string{"service-name": "web", "other": "x"}, Count: 2}, want: "args has other"},
		"an invalid condition":         {doc: argo("result[0] >= 0.95", "len(result) > 0 && result[0] >= 0.95"), ref: withArgs, want: "successCondition"},
		"an expr function":             {doc: argo("result[0] >= 0.95", "isNaN(result[0])"), ref: withArgs, want: "Sluice reads comparisons"},
		"a count that is no number":    {doc: argoSuccessRate, ref: TemplateRef{Args: map[string]string{"service-name": "web", "checks": "x"}, Count: 2}, want: `count: "x" is not a number`},
		"an interval without a count":  {doc: argo(`"{{args.checks}}"`, "2"), ref: TemplateRef{Args: map[string]string{"service-name": "web"}}, want: "no count"},
		"initialDelay":                 {doc: argo("interval: 5m", "interval: 5m\n    initialDelay: 1m"), ref: withArgs, want: "initialDelay is not supported"},
		"a Rollout, not a template":    {doc: argo("kind: AnalysisTemplate", "kind: Rollout"), ref: withArgs, want: "not an Argo Rollouts AnalysisTemplate"},
		"two documents":                {doc: argoSuccessRate + "---\nkind: AnalysisTemplate\n", ref: withArgs, want: "more than one YAML document"},
		"not YAML":                     {doc: "kind: [", ref: withArgs, want: "not a YAML document"},
		"flagger: datadog":             {doc: strings.Replace(flaggerNotFound, "type: prometheus", "type: datadog", 1), ref: TemplateRef{ThresholdRange: &ThresholdRange{Max: &max}}, flagger: true, want: `provider type "datadog" is not supported`},
		"flagger: no threshold":        {doc: flaggerNotFound, flagger: true, want: "thresholdRange needs min or max"},
		"flagger: a variable missing":  {doc: strings.Replace(flaggerNotFound, "{{ target }}", "{{ variables.app }}", 1), ref: TemplateRef{ThresholdRange: &ThresholdRange{Max: &max}}, flagger: true, want: "query"},
		"flagger: a broken template":   {doc: strings.Replace(flaggerNotFound, "{{ target }}", "{{ target", 1), ref: TemplateRef{ThresholdRange: &ThresholdRange{Max: &max}}, flagger: true, want: "query"},
		"flagger: credentials":         {doc: strings.Replace(flaggerNotFound, "type: prometheus", "type: prometheus\n    secretRef: {name: prom}", 1), ref: TemplateRef{ThresholdRange: &ThresholdRange{Max: &max}}, flagger: true, want: "secretRef is not supported"},
		"flagger: an AnalysisTemplate": {doc: argoSuccessRate, ref: TemplateRef{ThresholdRange: &ThresholdRange{Max: &max}}, flagger: true, want: "not a Flagger MetricTemplate"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			convert := ConvertAnalysisTemplate
			if tt.flagger {
				convert = ConvertMetricTemplate
			}
			_, _, err := convert([]byte(tt.doc), tt.ref)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to say %q", err, tt.want)
			}
		})
	}
}

// templateBlock is a verification block referencing the two documents.
const templateBlock = `    verification:
      soakTime: 1m
      templates:
        - analysisTemplate: analysis/success-rate.yaml
          args: {service-name: "{{ .Release }}", checks: "2"}
          count: 5
        - metricTemplate: analysis/not-found.yaml
          thresholdRange: {max: 5}
`

func serviceFiles(argo, flagger string) fstest.MapFS {
	return fstest.MapFS{
		"services/web/analysis/success-rate.yaml": {Data: []byte(argo)},
		"services/web/analysis/not-found.yaml":    {Data: []byte(flagger)},
		"services/other/analysis/x.yaml":          {Data: []byte(flagger)},
	}
}

// Built into a change: the templates' checks are the change's, with the
// documents' Prometheus address, and in its approvalDigest: a changed
// document is a changed digest.
func TestBuild_readsTemplatesFromTheServiceFolder(t *testing.T) {
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: "ns"}}
	build := func(files fstest.MapFS, block string) *sluicev1.ChangeRequest {
		return Build(Change{Repository: repo, Release: "web-prod", Service: "web", Environment: "prod", ServiceDir: "services/web",
			Name: "web-prod-1", Revision: strings.Repeat("a", 40), Attempt: 1, TargetNamespace: "web-prod",
			Artifact:     &artifact.Artifact{SHA256: "sha256:" + strings.Repeat("b", 64), ContentDigest: "sha256:" + strings.Repeat("c", 64)},
			Verification: VerificationBlockOf(verificationService(t, block), "prod"), Files: files})
	}
	flagger := strings.Replace(flaggerNotFound, "http://prometheus.istio-system:9090", "http://prometheus.example.com:9090", 1)
	cr := build(serviceFiles(argoSuccessRate, flagger), templateBlock)
	for _, f := range cr.Spec.Verdict.Findings {
		if f.Policy == "verification" {
			t.Fatalf("finding: %s", f.Message)
		}
	}
	v := cr.Spec.Verification
	if v == nil || len(v.Checks) != 3 || v.PrometheusURL != "http://prometheus.example.com:9090" || v.Checks[2].Name != "not-found-percentage" {
		t.Fatalf("verification = %+v", v)
	}
	weaker := build(serviceFiles(strings.Replace(argoSuccessRate, "0.95", "0.5", 1), flagger), templateBlock)
	if weaker.Spec.ApprovalDigest == cr.Spec.ApprovalDigest {
		t.Fatal("a weaker AnalysisTemplate kept the approvalDigest")
	}

	for name, tt := range map[string]struct{ block, want string }{
		"a path leaving the folder": {strings.Replace(templateBlock, "analysis/not-found.yaml", "../other/analysis/x.yaml", 1), "inside the service folder"},
		"a missing file":            {strings.Replace(templateBlock, "analysis/not-found.yaml", "analysis/gone.yaml", 1), "read services/web/analysis/gone.yaml"},
		"both kinds in one entry":   {strings.Replace(templateBlock, "- metricTemplate:", "- analysisTemplate: a.yaml\n          metricTemplate:", 1), "exactly one of"},
		"an unknown field":          {strings.Replace(templateBlock, "thresholdRange:", "threshold:", 1), `unknown field "threshold"`},
		"a template arg missing":    {strings.Replace(templateBlock, `service-name: "{{ .Release }}", `, "", 1), "arg service-name has no value"},
		"two Prometheus addresses":  {templateBlock + "      checks: []\n", "different Prometheus addresses"},
	} {
		t.Run(name, func(t *testing.T) {
			files := serviceFiles(argoSuccessRate, flagger)
			if strings.Contains(name, "addresses") {
				files = serviceFiles(argoSuccessRate, flaggerNotFound)
			}
			cr := build(files, tt.block)
			var msg string
			for _, f := range cr.Spec.Verdict.Findings {
				if f.Policy == "verification" && f.Severity == sluicev1.SeverityDeny {
					msg = f.Message
				}
			}
			if !strings.Contains(msg, tt.want) || cr.Spec.Verdict.Result != sluicev1.VerdictFail {
				t.Fatalf("deny finding %q (verdict %s), want it to say %q", msg, cr.Spec.Verdict.Result, tt.want)
			}
		})
	}
}

// FuzzConvertTemplates: any document is converted or refused, never a
// panic, and what is converted validates or is refused by Validate.
func FuzzConvertTemplates(f *testing.F) {
	f.Add([]byte(argoSuccessRate), false)
	f.Add([]byte(flaggerNotFound), true)
	f.Add([]byte("kind: AnalysisTemplate\napiVersion: argoproj.io/v1alpha1\nspec: {metrics: [{name: a, count: -1}]}"), false)
	max := 1.0
	f.Fuzz(func(t *testing.T, doc []byte, flagger bool) {
		convert := ConvertAnalysisTemplate
		if flagger {
			convert = ConvertMetricTemplate
		}
		checks, _, err := convert(doc, TemplateRef{Args: map[string]string{"service-name": "x"}, Count: 2, ThresholdRange: &ThresholdRange{Max: &max}})
		if err != nil {
			return
		}
		v := &sluicev1.VerificationSpec{PrometheusURL: "http://p:9090", Checks: checks}
		_ = v.Validate()
	})
}
