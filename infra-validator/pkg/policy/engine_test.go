package policy

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

func newEngine(t *testing.T, opts Options) *Engine {
	t.Helper()
	e, err := New(context.Background(), opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func mustJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func mustYAML(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := yaml.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func find(fs []report.Finding, sev report.Severity, policy string) []report.Finding {
	var out []report.Finding
	for _, f := range fs {
		if f.Severity == sev && f.Policy == policy {
			out = append(out, f)
		}
	}
	return out
}

const unknownPlan = `{"format_version":"1.2","resource_changes":[
 {"address":"aws_ebs_volume.data","mode":"managed","type":"aws_ebs_volume","name":"data",
  "change":{"actions":["create"],"before":null,"after":{"size":10,"tags":{"owner":"a"}},"after_unknown":{"encrypted":true,"id":true}}},
 {"address":"aws_db_instance.main","mode":"managed","type":"aws_db_instance","name":"main",
  "change":{"actions":["delete"],"before":{"tags":{}},"after":null,"after_unknown":{}}}]}`

func TestEval_defaultTerraformPoliciesDenyAndReportUnverifiable(t *testing.T) {
	e := newEngine(t, Options{})
	fs, err := e.Eval(context.Background(), KindTerraform, []Document{{Path: "plan.json", Value: mustJSON(t, unknownPlan)}})
	if err != nil {
		t.Fatal(err)
	}
	prot := find(fs, report.SeverityDeny, "sluice.terraform.protected/deny")
	if len(prot) != 1 || prot[0].Resource != "aws_db_instance.main" || prot[0].Source != "policy" || prot[0].File != "plan.json" {
		t.Fatalf("protected deny: %+v (all: %+v)", prot, fs)
	}
	unv := find(fs, report.SeverityUnverifiable, "sluice.terraform.encryption/unverifiable")
	if len(unv) != 1 || unv[0].Resource != "aws_ebs_volume.data" {
		t.Fatalf("unknown encryption must be unverifiable, got %+v", fs)
	}
	if d := find(fs, report.SeverityDeny, "sluice.terraform.encryption/deny"); len(d) != 0 {
		t.Fatalf("unknown value must not be a deny: %+v", d)
	}
}

func TestEval_kubernetesDefaultsPerObjectAndCombined(t *testing.T) {
	e := newEngine(t, Options{})
	dep := mustYAML(t, `
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: shop-prod}
spec:
  replicas: 1
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
        - {name: app, image: nginx, securityContext: {privileged: true}}
`)
	fs, err := e.Eval(context.Background(), KindKubernetes, []Document{{Path: "templates/deploy.yaml", Value: dep}})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		sev    report.Severity
		policy string
	}{
		{report.SeverityDeny, "sluice.kubernetes.security/deny"},
		{report.SeverityDeny, "sluice.kubernetes.images/deny"},
		{report.SeverityWarn, "sluice.kubernetes.resources/warn"},
		{report.SeverityWarn, "sluice.kubernetes.availability/warn"},
		{report.SeverityWarn, "sluice.kubernetes_combined.pdb/warn"},
	} {
		got := find(fs, want.sev, want.policy)
		if len(got) == 0 {
			t.Errorf("no %s finding from %s in %+v", want.sev, want.policy, fs)
			continue
		}
		if got[0].Resource != "Deployment/shop-prod/web" {
			t.Errorf("%s: resource %q", want.policy, got[0].Resource)
		}
	}
}

func TestNew_policyCompileErrorNamesFileAndLine(t *testing.T) {
	_, err := New(context.Background(), Options{PolicyDirs: []string{"testdata/badpolicy"}})
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("want *CompileError, got %v", err)
	}
	if len(ce.Problems) == 0 || !strings.HasSuffix(ce.Problems[0].File, "broken.rego") || ce.Problems[0].Line != 4 {
		t.Fatalf("problem must name broken.rego line 4: %+v", ce.Problems)
	}
	if !strings.Contains(err.Error(), "broken.rego:4:") {
		t.Fatalf("message %q must carry file:line", err)
	}
}

// TestEval_booleanDenyPassesAsInConftest: conftest v0.71 ignores a rule
// written "deny if { ... }" (a boolean, not a set of messages); so does the
// engine, to give the same results on the same policies.
func TestEval_booleanDenyPassesAsInConftest(t *testing.T) {
	e := newEngine(t, Options{PolicyDirs: []string{"testdata/ifpolicy"}, NoDefaults: true})
	fs, err := e.Eval(context.Background(), KindTerraform, []Document{{Path: "x.json", Value: map[string]any{"bad": true}}})
	if err != nil || len(fs) != 0 {
		t.Fatalf("want no findings, got %+v %v", fs, err)
	}
}

func TestNew_missingPolicyDirIsUsageError(t *testing.T) {
	_, err := New(context.Background(), Options{PolicyDirs: []string{"testdata/nope"}})
	var ce *CompileError
	if !errors.As(err, &ce) {
		t.Fatalf("want *CompileError, got %v", err)
	}
}

func TestEval_namespaceSelection(t *testing.T) {
	ctx := context.Background()
	doc := []Document{{Path: "x.json", Value: map[string]any{}}}
	cases := []struct {
		name     string
		opts     Options
		policies []string
	}{
		{"default namespace main has no policies here", Options{}, nil},
		{"exact namespace", Options{Namespaces: []string{"team.a"}}, []string{"team.a/deny"}},
		{"glob", Options{Namespaces: []string{"team.[ab]"}}, []string{"team.a/deny", "team.b/warn"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.PolicyDirs = []string{"testdata/ns/policies.rego", "testdata/ns/more.rego"}
			tc.opts.NoDefaults = true
			fs, err := newEngine(t, tc.opts).Eval(ctx, KindTerraform, doc)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, f := range fs {
				got = append(got, f.Policy)
			}
			if strings.Join(got, ",") != strings.Join(tc.policies, ",") {
				t.Fatalf("policies %v, want %v", got, tc.policies)
			}
		})
	}
	fs, err := newEngine(t, Options{PolicyDirs: []string{"testdata/ns/more.rego"}, AllNamespaces: true, NoDefaults: true}).Eval(ctx, KindTerraform, doc)
	if err != nil || len(fs) != 1 || fs[0].Resource != "thing/1" || fs[0].Severity != report.SeverityWarn {
		t.Fatalf("all namespaces: %+v %v", fs, err)
	}
}

func TestEval_objectWithoutMsgIsAnError(t *testing.T) {
	e := newEngine(t, Options{PolicyDirs: []string{"testdata/ns/badmsg.rego"}, Namespaces: []string{"team.c"}, NoDefaults: true})
	_, err := e.Eval(context.Background(), KindTerraform, []Document{{Path: "x.json", Value: map[string]any{}}})
	if err == nil || !strings.Contains(err.Error(), `"msg"`) {
		t.Fatalf("want msg error, got %v", err)
	}
}

func TestEval_dataFileOverridesDefaults(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/types.yaml", []byte("sluice:\n  config:\n    terraform:\n      allowed_instance_types: [\"x1.*\"]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	plan := mustJSON(t, `{"resource_changes":[{"address":"aws_instance.a","mode":"managed","type":"aws_instance","name":"a",
	 "change":{"actions":["create"],"after":{"instance_type":"x1.large","ami":"ami-1","tags":{"owner":"a"}},"after_unknown":{}}}]}`)
	ctx := context.Background()
	before, err := newEngine(t, Options{}).Eval(ctx, KindTerraform, []Document{{Path: "p", Value: plan}})
	if err != nil {
		t.Fatal(err)
	}
	if len(find(before, report.SeverityDeny, "sluice.terraform.allowlists/deny")) != 1 {
		t.Fatalf("x1.large is outside the default allowlist: %+v", before)
	}
	after, err := newEngine(t, Options{DataFiles: []string{dir + "/types.yaml"}}).Eval(ctx, KindTerraform, []Document{{Path: "p", Value: plan}})
	if err != nil {
		t.Fatal(err)
	}
	if len(find(after, report.SeverityDeny, "sluice.terraform.allowlists/deny")) != 0 {
		t.Fatalf("data file must widen the allowlist: %+v", after)
	}
	// The rest of the defaults is kept (deep merge): required tags still apply.
	if _, err := New(ctx, Options{DataFiles: []string{dir + "/missing.yaml"}}); err == nil {
		t.Fatal("missing data file must fail")
	}
}

// TestEval_secretPlantedInConfigMapNeverReachesAFinding: the default policy
// names the key only; a careless custom policy quoting the value is redacted.
func TestEval_secretPlantedInConfigMapNeverReachesAFinding(t *testing.T) {
	const secret = "AKIAZZZZZZZZZZZZZZZZ"
	const pemBody = "MIIEpAIBAAKCAQEAsecretkeymaterial"
	cm := map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cfg", "namespace": "shop"},
		"data": map[string]any{
			"aws_access_key": secret,
			"tls.key":        "-----BEGIN PRIVATE KEY-----\n" + pemBody + "\n-----END PRIVATE KEY-----\n",
		},
	}
	plan := mustJSON(t, `{"resource_changes":[{"address":"terraform_data.db","mode":"managed","type":"terraform_data","name":"db",
	 "change":{"actions":["create"],"after":{"password":"s3cr3t-db-pass"},"after_sensitive":{"password":true},"after_unknown":{}}}]}`)
	e := newEngine(t, Options{PolicyDirs: []string{"testdata/leaky"}})
	ctx := context.Background()
	kfs, err := e.Eval(ctx, KindKubernetes, []Document{{Path: "cm.yaml", Value: cm}})
	if err != nil {
		t.Fatal(err)
	}
	tfs, err := e.Eval(ctx, KindTerraform, []Document{{Path: "plan.json", Value: plan}})
	if err != nil {
		t.Fatal(err)
	}
	all := append(kfs, tfs...)
	if len(find(kfs, report.SeverityDeny, "sluice.kubernetes.secrets/deny")) != 2 {
		t.Fatalf("default policy must flag both keys: %+v", kfs)
	}
	if len(find(kfs, report.SeverityDeny, "main/deny")) != 2 || len(find(tfs, report.SeverityWarn, "main/warn")) != 1 {
		t.Fatalf("leaky policy must still report (redacted): %+v", all)
	}
	raw, _ := json.Marshal(all)
	for _, s := range []string{secret, pemBody, "s3cr3t-db-pass"} {
		if strings.Contains(string(raw), s) {
			t.Fatalf("secret %q leaked into findings: %s", s, raw)
		}
	}
	if !strings.Contains(string(raw), Redacted) {
		t.Fatalf("expected redaction marks in %s", raw)
	}
}

func TestEval_concurrentUseOfOneEngine(t *testing.T) {
	e := newEngine(t, Options{})
	plan := mustJSON(t, unknownPlan)
	want, err := e.Eval(context.Background(), KindTerraform, []Document{{Path: "p", Value: plan}})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := e.Eval(context.Background(), KindTerraform, []Document{{Path: "p", Value: plan}})
			if err == nil && len(got) != len(want) {
				err = errors.New("different result under concurrency")
			}
			if err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestNew_kindsLimitTheDefaultsLoaded(t *testing.T) {
	e := newEngine(t, Options{Kinds: []Kind{KindTerraform}})
	cm := map[string]any{"kind": "ConfigMap", "metadata": map[string]any{"name": "x"}, "data": map[string]any{"password": "hunter2hunter2"}}
	fs, err := e.Eval(context.Background(), KindKubernetes, []Document{{Path: "cm.yaml", Value: cm}})
	if err != nil || len(fs) != 0 {
		t.Fatalf("no Kubernetes defaults were loaded, got %+v %v", fs, err)
	}
	fs, err = e.Eval(context.Background(), KindTerraform, []Document{{Path: "p.json", Value: mustJSON(t, unknownPlan)}})
	if err != nil || len(fs) == 0 {
		t.Fatalf("Terraform defaults must run: %+v %v", fs, err)
	}
}
