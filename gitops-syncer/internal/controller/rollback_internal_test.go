package controller

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sluice-gitops/sluice/gitops-syncer/internal/validation"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// A rollback's fresh Terraform plan that destroys or replaces anything,
// or that has no summary, declines the rollback; one that only adds or
// changes, a Helm-only rollback, and any change that is no rollback pass.
func TestCheckRollbackPlan_declinesDestroysAndReplaces(t *testing.T) {
	tf := &sluicev1.ChangeSource{Terraform: &sluicev1.TerraformSource{}}
	rollback := func(src *sluicev1.ChangeSource) *changePlan {
		return &changePlan{source: src, rollback: &sluicev1.RollbackSpec{Of: "a-prod-2", To: "a-prod-1"}, target: &sluicev1.ChangeRequest{ObjectMeta: metav1.ObjectMeta{Name: "a-prod-1"}}}
	}
	for _, c := range []struct {
		name string
		plan *changePlan
		res  *validation.Result
		want string
	}{
		{"a destroy", rollback(tf), &validation.Result{PlanSummary: &sluicev1.PlanSummary{Destroy: 1}}, "destroys 1 and replaces 0"},
		{"a replace", rollback(tf), &validation.Result{PlanSummary: &sluicev1.PlanSummary{Add: 1, Replace: 2}}, "destroys 0 and replaces 2"},
		{"no summary", rollback(tf), &validation.Result{}, "has no summary"},
		{"not validated", rollback(tf), nil, "could not be validated"},
		{"adds and changes", rollback(tf), &validation.Result{PlanSummary: &sluicev1.PlanSummary{Add: 1, Change: 1}}, ""},
		{"helm only", rollback(&sluicev1.ChangeSource{}), &validation.Result{}, ""},
		{"no rollback", &changePlan{source: tf}, &validation.Result{PlanSummary: &sluicev1.PlanSummary{Destroy: 3}}, ""},
	} {
		err := checkRollbackPlan(c.plan, c.res)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: declined: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: got %v, want %q", c.name, err, c.want)
		case err != nil:
			if _, ok := err.(*declineError); !ok {
				t.Errorf("%s: %T is no declineError", c.name, err)
			}
		}
	}
}
