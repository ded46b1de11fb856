package controller_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

const alphaAnalysis = `apiVersion: argoproj.io/v1alpha1
kind: AnalysisTemplate
metadata:
  name: success-rate
spec:
  args:
  - name: service-name
  metrics:
  - name: success-rate
    interval: 1m
    count: 3
    successCondition: result[0] >= 0.95
    provider:
      prometheus:
        address: http://prometheus.monitoring:9090
        query: sum(rate(http_requests_total{service="{{args.service-name}}",code!~"5.."}[1m])) / sum(rate(http_requests_total{service="{{args.service-name}}"}[1m]))
`

// An AnalysisTemplate in the service folder is read from the commit
// (real git) and carried on the change as a check; editing only the
// template is a change of the service, with another approvalDigest.
func TestSync_verificationTemplatesAreReadFromTheCommit(t *testing.T) {
	ns := newNamespace(t)
	fixture := seedHelmRepo(t, t.TempDir(), "infra")
	fixture.WriteFile("services/alpha/service.yaml", "apiVersion: sluice.dev/v1alpha1\nkind: Service\nname: alpha\nowners: [team-alpha]\nchart: {path: charts/service}\nvalues: [values.yaml]\nenvironments:\n"+
		"  - name: staging\n    namespace: alpha-staging\n    delivery: helm\n    approval: {required: 1, autoApproveRisk: low}\n"+
		"    verification:\n      templates:\n        - analysisTemplate: analysis/success-rate.yaml\n          args: {service-name: \"{{ .Release }}\"}\n")
	fixture.WriteFile("services/alpha/analysis/success-rate.yaml", alphaAnalysis)
	first := fixture.Commit("verify alpha with its AnalysisTemplate", "bob@example.com")
	startSyncer(t, ns, "")
	repo := newRepository(t, ns, "infra", fixture.FileURL())
	waitHandled(t, repo, requestReconcile(t, repo))

	cr := changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", first, 1)]
	require.NotEmpty(t, cr.Name)
	v := cr.Spec.Verification
	require.NotNil(t, v, "findings: %+v", cr.Spec.Verdict.Findings)
	require.Len(t, v.Checks, 1)
	assert.Equal(t, "http://prometheus.monitoring:9090", v.PrometheusURL)
	assert.Equal(t, "result >= 0.95", v.Checks[0].SuccessCondition)
	assert.Contains(t, v.Checks[0].Query, `service="{{ .Release }}"`)
	assert.Equal(t, cr.ExpectedApprovalDigest(), cr.Spec.ApprovalDigest)

	fixture.WriteFile("services/alpha/analysis/success-rate.yaml", strings.Replace(alphaAnalysis, "result[0] >= 0.95", "result[0] >= 0.5", 1))
	second := fixture.Commit("a weaker success rate", "bob@example.com")
	waitHandled(t, repo, requestReconcile(t, repo))
	weaker := changeRequests(t, ns)[sluicev1.ChangeRequestName("alpha-staging", second, 1)]
	require.NotEmpty(t, weaker.Name, "editing the template alone is a change of alpha: %v", func() []string {
		var names []string
		for n, c := range changeRequests(t, ns) {
			names = append(names, n+" "+c.Spec.Revision)
		}
		return names
	}())
	assert.Equal(t, "result >= 0.5", weaker.Spec.Verification.Checks[0].SuccessCondition)
	assert.NotEqual(t, cr.Spec.ApprovalDigest, weaker.Spec.ApprovalDigest)
	assert.NotContains(t, changeRequests(t, ns), sluicev1.ChangeRequestName("beta-staging", second, 1), "beta did not change")
}
