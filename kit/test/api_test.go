// Package test checks testenv and the generated CRDs against a real
// kube-apiserver: the Sluice CRDs and the ones a suite names install, the
// samples are accepted, and every validation rule rejects what it should
// with a readable message.
package test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	testenv.Main(m, testenv.Options{CRDDirectoryPaths: []string{"testdata/widgets-crd.yaml"}}, func(e *testenv.Env) error { env = e; return nil })
}

const samplesDir = "../../operator/config/samples"

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// newNamespace creates a fresh namespace for one test.
func newNamespace(t *testing.T) string { return env.Namespace(t, "api-") }

// loadSample decodes a sample file into obj and moves it to namespace ns.
func loadSample(t *testing.T, file string, obj client.Object, ns string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(samplesDir, file))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, obj); err != nil {
		t.Fatalf("sample %s: %v", file, err)
	}
	obj.SetNamespace(ns)
}

func sampleChangeRequest(t *testing.T, ns string) *sluicev1.ChangeRequest {
	cr := &sluicev1.ChangeRequest{}
	loadSample(t, "changerequest.yaml", cr, ns)
	return cr
}

// expectRejected asserts the API server refuses err with a message holding
// every fragment.
func expectRejected(t *testing.T, err error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("accepted, want a rejection mentioning %q", fragments)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("rejection %q does not mention %q", err.Error(), f)
		}
	}
}

func TestCRDs_installAndAreEstablished(t *testing.T) {
	for _, plural := range []string{"repositories", "approvalpolicies", "releases", "changerequests", "approvals", "people"} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		if err := env.Client.Get(ctx(t), types.NamespacedName{Name: plural + ".gitops.sluice.dev"}, crd); err != nil {
			t.Fatalf("CRD %s: %v", plural, err)
		}
		established := false
		for _, c := range crd.Status.Conditions {
			if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
				established = true
			}
		}
		if !established {
			t.Errorf("CRD %s not established", plural)
		}
	}
}

func TestCRDDirectoryPaths_theCRDsASuiteNamesAreInstalled(t *testing.T) {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := env.Client.Get(ctx(t), types.NamespacedName{Name: "widgets.example.test"}, crd); err != nil {
		t.Fatalf("the CRD of testdata/widgets-crd.yaml: %v", err)
	}
}

func TestSamples_areAcceptedAndDefaulted(t *testing.T) {
	ns := newNamespace(t)
	objs := []struct {
		file string
		obj  client.Object
	}{
		{"repository.yaml", &sluicev1.Repository{}},
		{"approvalpolicy.yaml", &sluicev1.ApprovalPolicy{}},
		{"release.yaml", &sluicev1.Release{}},
		{"changerequest.yaml", &sluicev1.ChangeRequest{}},
		{"approval.yaml", &sluicev1.Approval{}},
	}
	for _, o := range objs {
		loadSample(t, o.file, o.obj, ns)
		if err := env.Client.Create(ctx(t), o.obj); err != nil {
			t.Fatalf("sample %s rejected: %v", o.file, err)
		}
	}
	person := &sluicev1.Person{}
	loadSample(t, "person.yaml", person, "")
	if err := env.Client.Create(ctx(t), person); err != nil {
		t.Fatalf("sample person.yaml rejected: %v", err)
	}
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), person) })
	// The sample's digest is the one every component computes.
	cr := objs[3].obj.(*sluicev1.ChangeRequest)
	if got := sluicev1.ComputeApprovalDigest("sluice-demo", cr.Spec.Release, cr.Spec.ContentDigest, cr.Spec.ManifestDigest, cr.Spec.PlanDigest); got != cr.Spec.ApprovalDigest {
		t.Errorf("sample approvalDigest %s, ComputeApprovalDigest gives %s", cr.Spec.ApprovalDigest, got)
	}

	// Defaults: a minimal Repository gets ref, interval, servicesPath, previews.
	repo := &sluicev1.Repository{
		ObjectMeta: metav1.ObjectMeta{Name: "minimal", Namespace: ns},
		Spec: sluicev1.RepositorySpec{
			URL:                "https://git.example.com/x.git",
			TargetNamespaces:   []string{"x-*"},
			ServiceAccountName: "deployer",
		},
	}
	if err := env.Client.Create(ctx(t), repo); err != nil {
		t.Fatal(err)
	}
	if repo.Spec.Ref == nil || repo.Spec.Ref.Branch != "main" || repo.Spec.Interval == nil || repo.Spec.Interval.Duration != time.Minute ||
		repo.Spec.ServicesPath != "services" || repo.Spec.Previews != sluicev1.PreviewsSameRepo ||
		repo.Spec.Timeout == nil || repo.Spec.Timeout.Duration != time.Minute {
		t.Errorf("defaults not applied: %+v", repo.Spec)
	}
}

func TestValidation_rejectsBadInputWithReadableMessages(t *testing.T) {
	ns := newNamespace(t)
	tests := []struct {
		name      string
		obj       func() client.Object
		fragments []string
	}{
		{"malformed content digest", func() client.Object {
			cr := sampleChangeRequest(t, ns)
			cr.Name = "bad-digest"
			cr.Spec.ContentDigest = "sha256:XYZ"
			return cr
		}, []string{"spec.contentDigest", "sha256:[a-f0-9]{64}"}},
		{"digest with the wrong algorithm", func() client.Object {
			cr := sampleChangeRequest(t, ns)
			cr.Name = "bad-algo"
			cr.Spec.ApprovalDigest = sluicev1.Digest("md5:" + strings.Repeat("a", 64))
			return cr
		}, []string{"spec.approvalDigest"}},
		{"a revision that is not a commit", func() client.Object {
			cr := sampleChangeRequest(t, ns)
			cr.Name = "bad-revision"
			cr.Spec.Revision = "main"
			return cr
		}, []string{"spec.revision"}},
		{"../ in a release path", func() client.Object {
			rel := &sluicev1.Release{}
			loadSample(t, "release.yaml", rel, ns)
			rel.Name = "dotdot"
			rel.Spec.SourcePath = "services/../../etc"
			return rel
		}, []string{"spec.sourcePath", "must not contain '..'"}},
		{"an absolute chart path", func() client.Object {
			rel := &sluicev1.Release{}
			loadSample(t, "release.yaml", rel, ns)
			rel.Name = "abs"
			rel.Spec.Chart.Path = "/etc/passwd"
			return rel
		}, []string{"spec.chart.path", "must be relative"}},
		{"../ in a values file", func() client.Object {
			rel := &sluicev1.Release{}
			loadSample(t, "release.yaml", rel, ns)
			rel.Name = "dotdot-values"
			rel.Spec.Values = []sluicev1.RelativePath{"values.yaml", ".."}
			return rel
		}, []string{"spec.values[1]", "must not contain '..'"}},
		{"an environment name with a dash", func() client.Object {
			rel := &sluicev1.Release{}
			loadSample(t, "release.yaml", rel, ns)
			rel.Name = "env-dash"
			rel.Spec.Environment = "prod-eu"
			return rel
		}, []string{"spec.environment", "[a-z0-9]+"}},
		{"both chart path and repo", func() client.Object {
			rel := &sluicev1.Release{}
			loadSample(t, "release.yaml", rel, ns)
			rel.Name = "two-charts"
			rel.Spec.Chart.Repo = "https://charts.example.com"
			rel.Spec.Chart.Name = "x"
			rel.Spec.Chart.Version = "1.0.0"
			return rel
		}, []string{"exactly one of path, repo"}},
		{"both a chart path and a Kustomize overlay", func() client.Object {
			rel := &sluicev1.Release{}
			loadSample(t, "release.yaml", rel, ns)
			rel.Name = "chart-and-overlay"
			rel.Spec.Chart.Kustomize = &sluicev1.KustomizeSource{Path: "services/x/overlays/prod"}
			return rel
		}, []string{"exactly one of path, repo, kustomize or manifests"}},
		{"a negative interval", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "negative"
			repo.Spec.Interval = &metav1.Duration{Duration: -time.Minute}
			return repo
		}, []string{"spec.interval"}},
		{"a zero interval", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "zero"
			repo.Spec.Interval = &metav1.Duration{Duration: 0}
			return repo
		}, []string{"interval must be positive"}},
		{"both branch and tag", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "branch-and-tag"
			repo.Spec.Ref = &sluicev1.GitReference{Branch: "main", Tag: "v1"}
			return repo
		}, []string{"exactly one of branch or tag"}},
		{"cosign for a Helm repository", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "cosign-https"
			repo.Spec.ChartRepositories = []sluicev1.ChartRepository{{URL: "https://charts.example/stable",
				Verify: &sluicev1.ChartVerification{Provider: sluicev1.ChartSignatureCosign, SecretRef: sluicev1.LocalObjectReference{Name: "keys"}}}}
			return repo
		}, []string{"cosign verifies charts from oci:// registries only"}},
		{"a remote base repository over plain http", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "remote-base-http"
			repo.Spec.KustomizeRemoteBases = []sluicev1.KustomizeRemoteBase{{URL: "http://git.example/platform"}}
			return repo
		}, []string{"spec.kustomizeRemoteBases[0].url"}},
		{"a remote base repository with a password in its URL", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "remote-base-userinfo"
			repo.Spec.KustomizeRemoteBases = []sluicev1.KustomizeRemoteBase{{URL: "https://ci:hunter2@git.example/platform"}}
			return repo
		}, []string{"put the credentials of a remote base repository in secretRef, not in its URL"}},
		{"a remote base repository listed twice", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "remote-base-twice"
			repo.Spec.KustomizeRemoteBases = []sluicev1.KustomizeRemoteBase{{URL: "https://git.example/platform"},
				{URL: "https://git.example/platform", SecretRef: &sluicev1.LocalObjectReference{Name: "git"}}}
			return repo
		}, []string{"Duplicate value"}},
		{"an unknown signature provider", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "notation"
			repo.Spec.ChartRepositories = []sluicev1.ChartRepository{{URL: "oci://registry.example/charts",
				Verify: &sluicev1.ChartVerification{Provider: "notation", SecretRef: sluicev1.LocalObjectReference{Name: "keys"}}}}
			return repo
		}, []string{"spec.chartRepositories[0].verify.provider"}},
		{"no target namespaces", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "no-targets"
			repo.Spec.TargetNamespaces = nil
			return repo
		}, []string{"spec.targetNamespaces"}},
		{"an extra namespace that is no name or glob", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "bad-extra-namespace"
			repo.Spec.AllowedExtraNamespaces = []string{"Checkout_Prod"}
			return repo
		}, []string{"allowedExtraNamespaces holds namespace names or globs"}},
		{"a cluster kind that is no kind name", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "bad-cluster-kind"
			repo.Spec.AllowedClusterKinds = []sluicev1.GroupKind{{Group: "rbac.authorization.k8s.io", Kind: "*"}}
			return repo
		}, []string{"kind must be a kind name"}},
		{"a cluster kind in a group that is no DNS subdomain", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "bad-cluster-group"
			repo.Spec.AllowedClusterKinds = []sluicev1.GroupKind{{Group: "RBAC/x", Kind: "ClusterRole"}}
			return repo
		}, []string{"group must be empty or a DNS subdomain"}},
		{"a cluster kind listed twice", func() client.Object {
			repo := &sluicev1.Repository{}
			loadSample(t, "repository.yaml", repo, ns)
			repo.Name = "twice-cluster-kind"
			repo.Spec.AllowedClusterKinds = []sluicev1.GroupKind{{Kind: "Namespace"}, {Kind: "Namespace"}}
			return repo
		}, []string{"lists each group and kind once"}},
		{"an approver identity without a prefix", func() client.Object {
			a := &sluicev1.Approval{}
			loadSample(t, "approval.yaml", a, ns)
			a.Name = "no-prefix"
			a.Spec.Approver = "alice"
			return a
		}, []string{"spec.approver"}},
		{"an unknown identity prefix in a rule", func() client.Object {
			p := &sluicev1.ApprovalPolicy{}
			loadSample(t, "approvalpolicy.yaml", p, ns)
			p.Name = "bad-prefix"
			p.Spec.Rule.Approvers = []sluicev1.Identity{"bitbucket:carol"}
			return p
		}, []string{"spec.rule.approvers[0]"}},
		{"a kubernetes approval with a github approver", func() client.Object {
			a := &sluicev1.Approval{}
			loadSample(t, "approval.yaml", a, ns)
			a.Name = "wrong-source"
			a.Spec.Approver = "github:alice"
			return a
		}, []string{"needs a k8s: approver"}},
		{"a pull-request approval without its review", func() client.Object {
			a := &sluicev1.Approval{}
			loadSample(t, "approval.yaml", a, ns)
			a.Name = "no-review"
			a.Spec.Source = sluicev1.SourcePullRequest
			a.Spec.Approver = "github:alice"
			return a
		}, []string{"needs pullRequest and reviewID"}},
		{"an unknown decision", func() client.Object {
			a := &sluicev1.Approval{}
			loadSample(t, "approval.yaml", a, ns)
			a.Name = "maybe"
			a.Spec.Decision = "maybe"
			return a
		}, []string{"spec.decision", "Unsupported value"}},
		{"a negative required count", func() client.Object {
			p := &sluicev1.ApprovalPolicy{}
			loadSample(t, "approvalpolicy.yaml", p, ns)
			p.Name = "negative-required"
			p.Spec.Rule.Required = -1
			return p
		}, []string{"spec.rule.required"}},
		{"a namespace glob with characters no namespace has", func() client.Object {
			p := &sluicev1.ApprovalPolicy{}
			loadSample(t, "approvalpolicy.yaml", p, ns)
			p.Name = "bad-glob"
			p.Spec.Namespaces = []sluicev1.NamespacePattern{"[prod]"}
			return p
		}, []string{"spec.namespaces[0]"}},
		{"an empty namespace selector", func() client.Object {
			p := &sluicev1.ApprovalPolicy{}
			loadSample(t, "approvalpolicy.yaml", p, ns)
			p.Name = "empty-selector"
			p.Spec.NamespaceSelector = &metav1.LabelSelector{}
			return p
		}, []string{"namespaceSelector must set matchLabels or matchExpressions"}},
		{"a group among a person's identities", func() client.Object {
			p := &sluicev1.Person{}
			loadSample(t, "person.yaml", p, "")
			p.Name = "group-person"
			p.Spec.Identities = append(p.Spec.Identities, "k8s-group:sre")
			return p
		}, []string{"a k8s-group: entry is a group"}},
		{"a person without identities", func() client.Object {
			p := &sluicev1.Person{}
			loadSample(t, "person.yaml", p, "")
			p.Name = "nobody"
			p.Spec.Identities = nil
			return p
		}, []string{"spec.identities"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			expectRejected(t, env.Client.Create(ctx(t), tt.obj()), tt.fragments...)
		})
	}
}

func TestChangeRequest_specIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	cr := sampleChangeRequest(t, ns)
	if err := env.Client.Create(ctx(t), cr); err != nil {
		t.Fatal(err)
	}
	cr.Spec.Verdict.Risk = sluicev1.RiskHigh
	expectRejected(t, env.Client.Update(ctx(t), cr), "ChangeRequest spec is immutable")

	// Metadata (finalizers, labels) may still change.
	fresh := &sluicev1.ChangeRequest{}
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(cr), fresh); err != nil {
		t.Fatal(err)
	}
	fresh.Labels["extra"] = "ok"
	if err := env.Client.Update(ctx(t), fresh); err != nil {
		t.Fatalf("metadata update refused: %v", err)
	}
}

func TestApproval_specIsImmutable(t *testing.T) {
	ns := newNamespace(t)
	a := &sluicev1.Approval{}
	loadSample(t, "approval.yaml", a, ns)
	if err := env.Client.Create(ctx(t), a); err != nil {
		t.Fatal(err)
	}
	a.Spec.Decision = sluicev1.DecisionReject
	expectRejected(t, env.Client.Update(ctx(t), a), "Approval spec is immutable")
}

func TestStatus_isWrittenOnlyThroughTheSubresource(t *testing.T) {
	ns := newNamespace(t)
	cr := sampleChangeRequest(t, ns)
	if err := env.Client.Create(ctx(t), cr); err != nil {
		t.Fatal(err)
	}
	// A main-resource update carrying status: the status part is dropped.
	cr.Status.Phase = sluicev1.PhaseApplied
	cr.Labels["touched"] = "yes"
	if err := env.Client.Update(ctx(t), cr); err != nil {
		t.Fatal(err)
	}
	got := &sluicev1.ChangeRequest{}
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(cr), got); err != nil {
		t.Fatal(err)
	}
	if got.Status.Phase != "" {
		t.Fatalf("status written through the main resource: phase %q", got.Status.Phase)
	}
	// Through the subresource it sticks.
	got.Status.Phase = sluicev1.PhaseAwaitingApproval
	got.Status.Approvals = 1
	if err := env.Client.Status().Update(ctx(t), got); err != nil {
		t.Fatal(err)
	}
	again := &sluicev1.ChangeRequest{}
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(cr), again); err != nil {
		t.Fatal(err)
	}
	if again.Status.Phase != sluicev1.PhaseAwaitingApproval || again.Status.Approvals != 1 {
		t.Fatalf("status subresource write lost: %+v", again.Status)
	}
	// And the status subresource cannot change the spec.
	again.Spec.Verdict.Risk = sluicev1.RiskHigh
	if err := env.Client.Status().Update(ctx(t), again); err != nil {
		t.Fatal(err)
	}
	final := &sluicev1.ChangeRequest{}
	if err := env.Client.Get(ctx(t), client.ObjectKeyFromObject(cr), final); err != nil {
		t.Fatal(err)
	}
	if final.Spec.Verdict.Risk != sluicev1.RiskLow {
		t.Fatalf("spec changed through the status subresource: risk %s", final.Spec.Verdict.Risk)
	}
}

// TestPrinterColumns_showWhatAPersonWants asks the API server for the table
// `kubectl get changerequests` prints and checks its columns and a row.
func TestPrinterColumns_showWhatAPersonWants(t *testing.T) {
	ns := newNamespace(t)
	cr := sampleChangeRequest(t, ns)
	if err := env.Client.Create(ctx(t), cr); err != nil {
		t.Fatal(err)
	}
	cr.Status.Phase = sluicev1.PhaseAwaitingApproval
	cr.Status.Approvals = 1
	cr.Status.EffectiveRule = &sluicev1.ApprovalRule{Required: 2}
	if err := env.Client.Status().Update(ctx(t), cr); err != nil {
		t.Fatal(err)
	}

	cfg := rest.CopyConfig(env.Config)
	cfg.GroupVersion = &sluicev1.GroupVersion
	cfg.APIPath = "/apis"
	cfg.NegotiatedSerializer = serializer.NewCodecFactory(env.Scheme).WithoutConversion()
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := rc.Get().Namespace(ns).Resource("changerequests").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	table := &metav1.Table{}
	if err := yaml.Unmarshal(raw, table); err != nil {
		t.Fatal(err)
	}
	// Cells hold every column; kubectl shows the priority-0 ones by default.
	var names []string
	var cells []interface{}
	if len(table.Rows) != 1 {
		t.Fatalf("%d rows, want 1", len(table.Rows))
	}
	for i, c := range table.ColumnDefinitions {
		if c.Priority == 0 {
			names = append(names, c.Name)
			cells = append(cells, table.Rows[0].Cells[i])
		}
	}
	want := []string{"Name", "Release", "Operation", "Phase", "Revision", "Risk", "Verdict", "Approvals", "Required", "Age"}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("columns %v, want %v", names, want)
	}
	row := cells
	t.Logf("kubectl get changerequests:\n%s", formatTable(names, row))
	if row[2] != "Apply" || row[3] != "AwaitingApproval" || row[5] != "low" || fmt.Sprint(row[7]) != "1" || fmt.Sprint(row[8]) != "2" {
		t.Fatalf("row %v", row)
	}
}

func formatTable(cols []string, row []interface{}) string {
	var b strings.Builder
	for i, c := range cols {
		fmt.Fprintf(&b, "%-*s ", width(c, row[i]), strings.ToUpper(c))
	}
	b.WriteString("\n")
	for i, c := range row {
		fmt.Fprintf(&b, "%-*v ", width(cols[i], c), c)
	}
	return b.String()
}

func width(col string, cell interface{}) int {
	if n := len(fmt.Sprint(cell)); n > len(col) {
		return n
	}
	return len(col)
}
