package changespec

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/artifact"
	"github.com/sluice-gitops/sluice/infra-validator/pkg/manifest"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// verificationService parses a service.yaml whose prod environment has
// the given verification block (YAML, indented under the environment).
func verificationService(t *testing.T, block string) *manifest.Service {
	t.Helper()
	src := "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: web\nchart:\n  path: chart\nenvironments:\n  - name: prod\n    namespace: web-prod\n" + block
	svc, err := manifest.Parse([]byte(src), "services/web/service.yaml")
	if err != nil {
		t.Fatalf("parse manifest: %v", err)
	}
	return svc
}

// buildWith builds a change of web-prod with the given verification block.
func buildWith(repo *sluicev1.Repository, block map[string]any) *sluicev1.ChangeRequest {
	return Build(Change{
		Repository: repo, Release: "web-prod", Service: "web", Environment: "prod", ServiceDir: "services/web",
		Name: "web-prod-1", Revision: strings.Repeat("a", 40), Attempt: 1, TargetNamespace: "web-prod",
		Artifact: &artifact.Artifact{SHA256: "sha256:" + strings.Repeat("b", 64), ContentDigest: "sha256:" + strings.Repeat("c", 64)},
		Result:   nil, Verification: block,
	})
}

const strictBlock = `    verification:
      prometheusURL: http://prometheus:9090
      soakTime: 2m
      checks:
        - name: error-rate
          query: sum(rate(http_errors_total{namespace="{{ .Namespace }}"}[1m]))
          successCondition: result < 0.005
          interval: 30s
          count: 3
`

// The verification block of service.yaml is carried on the change and
// is part of its approvalDigest: a weaker check is another digest, so an
// approval of the strict one does not carry it.
func TestBuild_carriesTheVerificationBlockInTheApprovalDigest(t *testing.T) {
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: "ns"}}
	strict := buildWith(repo, VerificationBlockOf(verificationService(t, strictBlock), "prod"))
	v := strict.Spec.Verification
	if v == nil || len(v.Checks) != 1 || v.Checks[0].SuccessCondition != "result < 0.005" || v.Checks[0].Count != 3 || v.SoakTime.Duration.String() != "2m0s" {
		t.Fatalf("verification carried = %+v", v)
	}
	if strict.Spec.ApprovalDigest != strict.ExpectedApprovalDigest() {
		t.Fatal("the syncer's digest disagrees with the operator's")
	}
	weak := buildWith(repo, VerificationBlockOf(verificationService(t, strings.Replace(strictBlock, "result < 0.005", "result < 0.5", 1)), "prod"))
	if weak.Spec.ApprovalDigest == strict.Spec.ApprovalDigest {
		t.Fatal("weakening the check kept the approvalDigest")
	}
	none := buildWith(repo, nil)
	if none.Spec.Verification != nil || none.Spec.ApprovalDigest == strict.Spec.ApprovalDigest {
		t.Fatalf("a change without verification: %+v, digest %s", none.Spec.Verification, none.Spec.ApprovalDigest)
	}
}

// The Repository's defaults fill what the environment leaves out.
func TestBuild_resolvesTheRepositoryDefaults(t *testing.T) {
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: "ns"},
		Spec: sluicev1.RepositorySpec{Verification: &sluicev1.VerificationSpec{PrometheusURL: "http://default:9090"}}}
	block := strings.Replace(strictBlock, "      prometheusURL: http://prometheus:9090\n", "", 1)
	cr := buildWith(repo, VerificationBlockOf(verificationService(t, block), "prod"))
	if cr.Spec.Verification == nil || cr.Spec.Verification.PrometheusURL != "http://default:9090" {
		t.Fatalf("resolved = %+v", cr.Spec.Verification)
	}
	for _, f := range cr.Spec.Verdict.Findings {
		if f.Policy == "verification" {
			t.Fatalf("a valid block got a finding: %+v", f)
		}
	}
}

// A bad verification block is a deny finding that says what is wrong,
// on service.yaml: the change is rejected rather than verified with
// other checks than written.
func TestBuild_refusesABadVerificationBlock(t *testing.T) {
	repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Name: "repo", Namespace: "ns"}}
	tests := map[string]struct{ block, want string }{
		"misspelt field": {strings.Replace(strictBlock, "successCondition", "succesCondition", 1), `unknown field "succesCondition"`},
		"bad condition":  {strings.Replace(strictBlock, "result < 0.005", "result < 0.5%", 1), "not a finite number"},
		"no prometheus":  {strings.Replace(strictBlock, "      prometheusURL: http://prometheus:9090\n", "", 1), "prometheusURL is required"},
		"a bad duration": {strings.Replace(strictBlock, "30s", "thirty seconds", 1), "invalid verification"},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			cr := buildWith(repo, VerificationBlockOf(verificationService(t, tt.block), "prod"))
			if cr.Spec.Verdict.Result != sluicev1.VerdictFail {
				t.Fatalf("verdict = %s, want fail", cr.Spec.Verdict.Result)
			}
			for _, f := range cr.Spec.Verdict.Findings {
				if f.Policy == "verification" && f.Severity == sluicev1.SeverityDeny && strings.Contains(f.Message, tt.want) && f.File == "services/web/service.yaml" {
					return
				}
			}
			t.Fatalf("no deny finding saying %q: %+v", tt.want, cr.Spec.Verdict.Findings)
		})
	}
}
