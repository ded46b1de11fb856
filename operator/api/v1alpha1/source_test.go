package v1alpha1

import "testing"

// A change says what it acts on; a Delete, what was applied.
func TestSourceAccessors_readTheChangeAndForADeleteWhatWasApplied(t *testing.T) {
	pushed := &ChangeSource{Service: "web", Environment: "prod", Path: "services/web", Terraform: &TerraformSource{Dir: "pushed", Workspace: "pushed"}}
	applied := &ChangeSource{Service: "web", Environment: "prod", Path: "services/web-old", Terraform: &TerraformSource{Dir: "applied"}}
	apply := &ChangeRequest{Spec: ChangeRequestSpec{TargetNamespace: "staging-ns", Delivery: DeliveryArgoCD, Source: pushed}}
	del := &ChangeRequest{Spec: ChangeRequestSpec{Operation: OperationDelete, TargetNamespace: "staging-ns", Source: pushed,
		Deletion: &DeletionSpec{TargetNamespace: "prod-ns", Delivery: DeliveryArgoCD, Source: applied, Terraform: &TerraformSource{Dir: "destroyed"}}}}
	bareDel := &ChangeRequest{Spec: ChangeRequestSpec{Operation: OperationDelete, TargetNamespace: "staging-ns", Deletion: &DeletionSpec{}}}

	for _, tc := range []struct {
		name                 string
		cr                   *ChangeRequest
		source               *ChangeSource
		stack                string
		delivery             Delivery
		namespace, appliedNS string
	}{
		{"an apply acts on its own fields", apply, pushed, "pushed", DeliveryArgoCD, "staging-ns", "prod-ns"},
		{"a delete acts on what was applied", del, applied, "destroyed", DeliveryArgoCD, "prod-ns", "other-ns"},
		{"a delete without deletion fields falls back to the applied namespace", bareDel, nil, "", DeliveryHelm, "prod-ns", "prod-ns"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cr.SourceOf(); got != tc.source {
				t.Errorf("SourceOf = %+v, want %+v", got, tc.source)
			}
			if got := tc.cr.StackOf(); (got == nil && tc.stack != "") || (got != nil && string(got.Dir) != tc.stack) {
				t.Errorf("StackOf = %+v, want dir %q", got, tc.stack)
			}
			if got := tc.cr.DeliveryOf(); got != tc.delivery {
				t.Errorf("DeliveryOf = %q, want %q", got, tc.delivery)
			}
			if got := tc.cr.NamespaceOf(tc.appliedNS); got != tc.namespace {
				t.Errorf("NamespaceOf(%q) = %q, want %q", tc.appliedNS, got, tc.namespace)
			}
		})
	}
}
