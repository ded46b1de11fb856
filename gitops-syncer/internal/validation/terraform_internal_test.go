package validation

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/terraform"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestTerraformProblems_nameFilesInsideTheRepositoryOnly(t *testing.T) {
	e := &terraform.RunError{Step: "init", Kind: terraform.ErrorConfiguration, Diagnostics: []terraform.Diagnostic{
		{Summary: "Unsupported argument", Detail: `An argument named "bogus" is not expected here.`, File: "main.tf", Line: 3},
		{Summary: "Invalid reference", File: "../../_modules/queue/main.tf", Line: 7},
		{Summary: "Invalid expression", File: "../../../../../etc/x.tf", Line: 1},
		{Summary: "Value for undeclared variable"},
	}}
	got := terraformProblems(e, "services/checkout/terraform")
	want := []sluicev1.Finding{
		{Severity: sluicev1.SeverityDeny, Source: "terraform", Policy: "terraform.init", File: "services/checkout/terraform/main.tf", Line: 3,
			Message: `Unsupported argument: An argument named "bogus" is not expected here.`},
		{Severity: sluicev1.SeverityDeny, Source: "terraform", Policy: "terraform.init", File: "services/_modules/queue/main.tf", Line: 7, Message: "Invalid reference"},
		{Severity: sluicev1.SeverityDeny, Source: "terraform", Policy: "terraform.init", File: "services/checkout/terraform", Message: "Invalid expression (in x.tf line 1)"},
		{Severity: sluicev1.SeverityDeny, Source: "terraform", Policy: "terraform.init", File: "services/checkout/terraform", Message: "Value for undeclared variable"},
	}
	assert.Equal(t, want, got)
	assert.Len(t, terraformProblems(&terraform.RunError{Step: "plan", Kind: terraform.ErrorConfiguration}, "tf"), 1, "no diagnostics still says why")
}
