package helmcheck

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chartutil"
	kubefake "helm.sh/helm/v3/pkg/kube/fake"
	"helm.sh/helm/v3/pkg/storage"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

const charts = "testdata/charts"

func render(t testing.TB, opts Options) *Result {
	t.Helper()
	if opts.ReleaseName == "" {
		opts.ReleaseName = "web"
	}
	if opts.Namespace == "" {
		opts.Namespace = "shop"
	}
	r, err := Render(context.Background(), opts)
	if err != nil {
		t.Fatalf("Render %s: %v", opts.Chart, err)
	}
	return r
}

func findings(r *Result, sev report.Severity) []report.Finding {
	var out []report.Finding
	for _, f := range r.Findings {
		if f.Severity == sev {
			out = append(out, f)
		}
	}
	return out
}

func TestRender_goodChartHasADigestAndNoFindings(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "good")})
	if len(r.Findings) != 0 {
		t.Fatalf("findings on a good chart: %+v", r.Findings)
	}
	if r.ManifestDigest != ManifestDigest([]byte(r.Manifest)) || !strings.HasPrefix(r.ManifestDigest, "sha256:") {
		t.Errorf("digest %q does not hash the manifest", r.ManifestDigest)
	}
	if !strings.HasPrefix(r.Manifest, "---\n# Source: good/templates/") {
		t.Errorf("manifest is not in Helm's post-renderer form:\n%s", r.Manifest)
	}
	var ids []string
	for _, o := range r.Objects {
		ids = append(ids, o.ID())
	}
	// Helm's install order: ConfigMap, Service, Deployment.
	if want := []string{"ConfigMap/shop/web", "Service/shop/web", "Deployment/shop/web"}; !reflect.DeepEqual(ids, want) {
		t.Errorf("objects %v, want %v", ids, want)
	}
	if r.Risk != report.RiskMedium || r.ChartName != "good" || r.ChartVersion != "1.2.3" {
		t.Errorf("first install: risk %s chart %s-%s", r.Risk, r.ChartName, r.ChartVersion)
	}
	if r.Values["replicaCount"] == nil {
		t.Error("merged values are missing")
	}
	// The packaged chart renders the same bytes.
	if tgz := render(t, Options{Chart: filepath.Join(charts, "good-1.2.3.tgz")}); tgz.ManifestDigest != r.ManifestDigest {
		t.Errorf("packaged chart digest %s != folder digest %s", tgz.ManifestDigest, r.ManifestDigest)
	}
	// The release name, namespace and Kubernetes version are part of what
	// is rendered, so of the digest.
	for _, o := range []Options{
		{Chart: filepath.Join(charts, "good"), ReleaseName: "shop-web"},
		{Chart: filepath.Join(charts, "good"), KubeVersion: "v1.30.0"},
		{Chart: filepath.Join(charts, "good"), ValuesFiles: []string{"testdata/values/new-image.yaml"}},
	} {
		if other := render(t, o); other.ManifestDigest == r.ManifestDigest {
			t.Errorf("%+v rendered the same digest", o)
		}
	}
	if kv := render(t, Options{Chart: filepath.Join(charts, "good"), KubeVersion: "1.30.0"}); !strings.Contains(kv.Manifest, `"v1.30.0"`) {
		t.Error("KubeVersion did not reach the templates")
	}
}

// helmConfig is an action.Configuration as an applier has it, with the
// cluster replaced by Helm's printing client and in-memory release storage,
// so the real install and upgrade code paths run without a cluster.
func helmConfig(t *testing.T) *action.Configuration {
	t.Helper()
	kv, err := chartutil.ParseKubeVersion(DefaultKubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	return &action.Configuration{
		Releases:     storage.Init(driver.NewMemory()),
		KubeClient:   &kubefake.PrintingKubeClient{Out: io.Discard},
		Capabilities: caps,
		Log:          func(string, ...any) {},
	}
}

func TestDigestPostRenderer_matchesWhatARealInstallAndUpgradeInstall(t *testing.T) {
	chartDir := filepath.Join(charts, "good")
	checked := render(t, Options{Chart: chartDir})
	cfg := helmConfig(t)

	ch, err := LoadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	vals, err := MergeValues(nil)
	if err != nil {
		t.Fatal(err)
	}
	inst := action.NewInstall(cfg)
	inst.ReleaseName, inst.Namespace = "web", "shop"
	inst.PostRenderer = &DigestPostRenderer{Expected: checked.ManifestDigest}
	rel, err := inst.Run(ch, vals)
	if err != nil {
		t.Fatalf("install with the approved digest: %v", err)
	}
	if rel.Manifest != checked.Manifest {
		t.Error("the installed manifest differs from the checked one")
	}

	// An upgrade to the same content passes; the applier checks the
	// digest approved for the new change.
	up := action.NewUpgrade(cfg)
	up.Namespace = "shop"
	up.PostRenderer = &DigestPostRenderer{Expected: checked.ManifestDigest}
	if _, err := up.Run("web", ch, vals); err != nil {
		t.Fatalf("upgrade with the approved digest: %v", err)
	}

	// Values that were not approved are refused before anything is applied.
	changed, err := MergeValues([]string{"testdata/values/new-image.yaml"})
	if err != nil {
		t.Fatal(err)
	}
	up = action.NewUpgrade(cfg)
	up.Namespace = "shop"
	pr := &DigestPostRenderer{Expected: checked.ManifestDigest}
	up.PostRenderer = pr
	if _, err := up.Run("web", ch, changed); !errors.Is(err, ErrManifestMismatch) {
		t.Fatalf("want ErrManifestMismatch, got %v", err)
	}
	want := render(t, Options{Chart: chartDir, ValuesFiles: []string{"testdata/values/new-image.yaml"}}).ManifestDigest
	if got, ran := pr.Digest(); !ran || got != want {
		t.Errorf("the upgrade rendered %s, the validator %s for the same values", got, want)
	}
}

func TestRender_templateErrorsAreFindingsWithFileAndLine(t *testing.T) {
	tests := []struct {
		chart, file string
		line        int
		msg         string
	}{
		{"template-error", "charts/x/templates/configmap.yaml", 7, "nil pointer evaluating"},
		{"parse-error", "charts/x/templates/configmap.yaml", 6, `unexpected "}"`},
	}
	for _, tt := range tests {
		t.Run(tt.chart, func(t *testing.T) {
			r := render(t, Options{Chart: filepath.Join(charts, tt.chart), SourcePrefix: "charts/x"})
			deny := findings(r, report.SeverityDeny)
			if len(deny) != 1 {
				t.Fatalf("want one deny finding, got %+v", r.Findings)
			}
			f := deny[0]
			if f.File != tt.file || f.Line != tt.line || !strings.Contains(f.Message, tt.msg) || f.Policy != "helm.template" {
				t.Errorf("finding %+v, want %s:%d %q", f, tt.file, tt.line, tt.msg)
			}
			if r.ManifestDigest != "" || r.Risk != report.RiskHigh {
				t.Errorf("a chart that does not render: digest %q risk %s", r.ManifestDigest, r.Risk)
			}
		})
	}
}

func TestRender_valuesBreakingTheSchemaAreFindingsWithoutTheValues(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "good"), ValuesFiles: []string{"testdata/values/bad-schema.yaml"}})
	var schema []string
	for _, f := range r.Findings {
		if f.Policy == "helm.values_schema" {
			if f.Severity != report.SeverityDeny || f.File != "values.schema.json" {
				t.Errorf("schema finding %+v", f)
			}
			schema = append(schema, f.Message)
		}
	}
	want := []string{
		"values /image/tag: value does not match the pattern ^[0-9]+\\.[0-9]+\\.[0-9]+$",
		"values /image: additional properties not allowed: registry",
		"values /replicaCount: got string, want integer",
	}
	if !reflect.DeepEqual(schema, want) {
		t.Errorf("schema findings\n%q\nwant\n%q", schema, want)
	}
	out, _ := json.Marshal(r.Findings)
	if strings.Contains(string(out), "s3cret-tag-value") || strings.Contains(string(out), "three") {
		t.Error("a finding repeats a value")
	}
}

func TestRender_schemaNeverFetchesReferences(t *testing.T) {
	dir := t.TempDir()
	chartDir := filepath.Join(dir, "ref")
	if err := os.MkdirAll(filepath.Join(chartDir, "templates"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"Chart.yaml":         "apiVersion: v2\nname: ref\nversion: 0.1.0\n",
		"values.yaml":        "a: 1\n",
		"values.schema.json": `{"$ref": "file:///etc/passwd"}`,
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(chartDir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := render(t, Options{Chart: chartDir})
	deny := findings(r, report.SeverityDeny)
	if len(deny) != 1 || !strings.Contains(deny[0].Message, "external references are not followed") {
		t.Fatalf("want one finding about the reference, got %+v", r.Findings)
	}
}

func TestRender_strictDecodingReportsUnknownFieldsAndWrongTypes(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "unknown-field")})
	var got []string
	for _, f := range r.Findings {
		got = append(got, string(f.Severity)+" "+f.Resource+" "+f.File+": "+f.Message)
	}
	want := []string{
		"deny Deployment/shop/web templates/deployment.yaml: json: cannot unmarshal string into Go struct field ContainerPort.spec.template.spec.containers.ports.containerPort of type int32",
		`deny Deployment/shop/web templates/deployment.yaml: unknown field "spec.template.spec.containers[0].imagePullPolicyy"`,
		"info Widget/shop/web templates/widget.yaml: not checked against a schema: example.com/v1 Widget is a kind the Kubernetes scheme does not know (custom resource?)",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("findings\n%q\nwant\n%q", got, want)
	}
}

func TestUnknownFields_acceptsEveryFieldOfAValidObject(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "good")})
	for _, o := range r.Objects {
		if o.Kind != "Deployment" {
			continue
		}
		var unknown []string
		unknownFields(o.Object, reflect.TypeOf(&appsv1.Deployment{}), "", &unknown)
		if len(unknown) != 0 {
			t.Errorf("false unknown fields: %v", unknown)
		}
	}
}

func TestRender_lookupIsAWarning(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "lookup")})
	warn := findings(r, report.SeverityWarn)
	if len(warn) != 1 || warn[0].File != "templates/secret.yaml" || warn[0].Line != 1 || !strings.Contains(warn[0].Message, "lookup") {
		t.Fatalf("want one lookup warning on templates/secret.yaml:1, got %+v", r.Findings)
	}
	// Client-only, lookup finds nothing: the chart takes its else branch.
	if !strings.Contains(r.Manifest, "Z2VuZXJhdGVkLWF0LWluc3RhbGw=") {
		t.Error("the render did not take the no-cluster branch")
	}
}

func TestRender_hooksCRDsAndRBACAreFlaggedAndHighRisk(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "platform")})
	policies := map[string]int{}
	for _, f := range r.Findings {
		policies[string(f.Severity)+" "+f.Policy]++
	}
	want := map[string]int{
		"warn helm.crds_not_digested": 1,
		"warn helm.unstable_render":   2, // .Release.Revision and now
		"info helm.strict_decode":     1, // the CRD is skipped
	}
	if !reflect.DeepEqual(policies, want) {
		t.Errorf("findings %v, want %v", policies, want)
	}
	if r.Risk != report.RiskHigh || !strings.Contains(strings.Join(r.RiskReasons, "\n"), "ClusterRole/web-reader: new RBAC object") {
		t.Errorf("risk %s reasons %v", r.Risk, r.RiskReasons)
	}
	var hook, crd bool
	for _, o := range r.Objects {
		hook = hook || (o.Hook && o.Kind == "Job")
		crd = crd || (o.CRDFolder && o.Kind == "CustomResourceDefinition" && o.Namespace == "")
	}
	if !hook || !crd {
		t.Errorf("objects lack the hook (%v) or the CRD (%v)", hook, crd)
	}
	if strings.Contains(r.Manifest, "kind: Job") || strings.Contains(r.Manifest, "CustomResourceDefinition") {
		t.Error("hooks or crds/ are in the digested manifest; Helm does not post-render them")
	}
}

func TestRender_riskAgainstThePreviousManifest(t *testing.T) {
	base := render(t, Options{Chart: filepath.Join(charts, "good")})
	withPolicy := base.Manifest + "---\n# Source: good/templates/netpol.yaml\napiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: web\nspec:\n  podSelector: {}\n"
	tests := []struct {
		name     string
		values   []string
		previous string
		risk     report.Risk
		reason   string
	}{
		{"no change", nil, base.Manifest, report.RiskLow, ""},
		{"image, replicas and config data", []string{"testdata/values/new-image.yaml"}, base.Manifest, report.RiskLow, ""},
		{"a new object", []string{"testdata/values/ingress.yaml"}, base.Manifest, report.RiskMedium, "Ingress/shop/web: new object"},
		{"a changed service port", nil, strings.Replace(base.Manifest, "port: 80\n", "port: 8080\n", 1), report.RiskMedium, "Service/shop/web: changed"},
		{"a deleted NetworkPolicy", nil, withPolicy, report.RiskHigh, "NetworkPolicy/shop/web: deleted"},
		{"a first install", nil, "", report.RiskMedium, "Deployment/shop/web: new object"},
		{"an unreadable previous manifest", nil, base.Manifest + "---\n# Source: x.yaml\nkind: [\n", report.RiskHigh, "previous manifest cannot be read"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, Options{Chart: filepath.Join(charts, "good"), ValuesFiles: tt.values, Previous: tt.previous})
			if r.Risk != tt.risk {
				t.Errorf("risk %s, want %s (%v)", r.Risk, tt.risk, r.RiskReasons)
			}
			if tt.reason != "" && !strings.Contains(strings.Join(r.RiskReasons, "\n"), tt.reason) {
				t.Errorf("reasons %v lack %q", r.RiskReasons, tt.reason)
			}
			if tt.reason == "" && len(r.RiskReasons) != 0 {
				t.Errorf("unexpected reasons %v", r.RiskReasons)
			}
		})
	}
}

func TestRender_stopsAtTheTimeLimit(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "slow"), Timeout: 50 * time.Millisecond})
	deny := findings(r, report.SeverityDeny)
	if len(deny) != 1 || deny[0].Message != "rendering did not finish within 50ms" || r.Risk != report.RiskHigh {
		t.Fatalf("want a time-limit finding, got %+v", r.Findings)
	}
}

func TestRender_refusesBadOptionsAndInput(t *testing.T) {
	good := filepath.Join(charts, "good")
	badYAML := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(badYAML, []byte("a: [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no chart", Options{ReleaseName: "web", Namespace: "shop"}, "no chart"},
		{"a missing chart", Options{Chart: filepath.Join(charts, "nope"), ReleaseName: "web", Namespace: "shop"}, "loading chart"},
		{"a bad release name", Options{Chart: good, ReleaseName: "Web_1", Namespace: "shop"}, "release name"},
		{"a bad namespace", Options{Chart: good, ReleaseName: "web", Namespace: "Shop"}, "namespace"},
		{"a missing values file", Options{Chart: good, ReleaseName: "web", Namespace: "shop", ValuesFiles: []string{"testdata/values/nope.yaml"}}, "values file"},
		{"a values file that is not YAML", Options{Chart: good, ReleaseName: "web", Namespace: "shop", ValuesFiles: []string{badYAML}}, "values file"},
		{"a bad Kubernetes version", Options{Chart: good, ReleaseName: "web", Namespace: "shop", KubeVersion: "latest"}, "kubernetes version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Render(context.Background(), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestParseManifest_splitsHelmOutput(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "good")})
	objs, err := ParseManifest(r.Manifest)
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) != 3 || objs[2].Source != "good/templates/deployment.yaml" || objs[2].Name != "web" {
		t.Errorf("objects %+v", objs)
	}
	if _, err := ParseManifest("---\n# Source: x.yaml\nkind: [\n"); err == nil {
		t.Error("a broken document was accepted")
	}
}

func FuzzParseManifest(f *testing.F) {
	f.Add("---\n# Source: a/templates/x.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n")
	f.Add("---\n---\n# only a comment\n")
	f.Add("apiVersion: v1\nkind: List\nitems: [1, 2]\n---\n- a\n")
	f.Add("a: &x [*x, *x]\n")
	f.Fuzz(func(t *testing.T, manifest string) {
		objs, _ := ParseManifest(manifest)
		for _, o := range objs {
			if o.APIVersion == "" || o.Kind == "" || o.Object == nil {
				t.Fatalf("an incomplete object was returned: %+v", o)
			}
			_ = o.ID()
		}
	})
}

// BenchmarkRender is one library check of a chart as the syncer runs it:
// load, values schema, client-only render with digest, strict decoding.
func BenchmarkRender(b *testing.B) {
	opts := Options{Chart: filepath.Join(charts, "good"), ReleaseName: "web", Namespace: "shop",
		ValuesFiles: []string{"testdata/values/new-image.yaml"}}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		if _, err := Render(context.Background(), opts); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRender_subchartFindingsNameTheSubchartFiles(t *testing.T) {
	r := render(t, Options{Chart: filepath.Join(charts, "parent"), SourcePrefix: "charts/parent"})
	var got []string
	for _, f := range r.Findings {
		got = append(got, string(f.Severity)+" "+f.File+":"+strconv.Itoa(f.Line)+" "+f.Policy)
	}
	want := []string{
		"warn charts/parent/charts/child/templates/secret.yaml:7 helm.unstable_render",
		"deny charts/parent/charts/child/values.schema.json:0 helm.values_schema",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("findings\n%q\nwant\n%q", got, want)
	}
	if len(r.Objects) != 2 || r.ManifestDigest == "" {
		t.Errorf("objects %d digest %q", len(r.Objects), r.ManifestDigest)
	}
}
