package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Operation says what an approved ChangeRequest does to its release.
// +kubebuilder:validation:Enum=Apply;Delete
type Operation string

const (
	// OperationApply installs or upgrades the release at the change's
	// revision (the default).
	OperationApply Operation = "Apply"
	// OperationDelete removes the release: its workload, then its
	// infrastructure through the approved destroy plan, then the Release
	// and its Terraform state.
	OperationDelete Operation = "Delete"
)

// ObjectReference names one Kubernetes object a Delete change removes.
type ObjectReference struct {
	// APIVersion of the object.
	// +kubebuilder:validation:MaxLength=253
	APIVersion string `json:"apiVersion"`
	// Kind of the object.
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
	// Namespace of the object; empty for cluster-scoped objects.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the object.
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// DeletionSpec is what a Delete change removes, recorded by the syncer from
// the release's last applied revision (never from the commit that removed
// it).
type DeletionSpec struct {
	// AppliedChange is the applied ChangeRequest whose result is removed.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	AppliedChange string `json:"appliedChange,omitempty"`

	// AppliedRevision is the commit of that change; the artifact and the
	// destroy plan are made from it.
	// +kubebuilder:validation:Pattern=`^([a-f0-9]{40}([a-f0-9]{24})?)?$`
	// +optional
	AppliedRevision string `json:"appliedRevision,omitempty"`

	// AppliedDigest is the approvalDigest of that change. The operator
	// refuses the deletion when the Release's appliedDigest moved on
	// since (something else was applied after the Delete was proposed).
	// +optional
	AppliedDigest Digest `json:"appliedDigest,omitempty"`

	// TargetNamespace is the namespace the applied change deployed to (the
	// Release's status.appliedTargetNamespace), where the workload is
	// removed from; never the namespace of a later, unapplied push.
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?)?$`
	// +kubebuilder:validation:MaxLength=63
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`

	// Delivery is how the applied change was delivered (helm or argocd):
	// what removes the workload.
	// +optional
	Delivery Delivery `json:"delivery,omitempty"`

	// Source is the applied change's source (its folder, chart, values and
	// Terraform stack), copied from the applied ChangeRequest.
	// +optional
	Source *ChangeSource `json:"source,omitempty"`

	// Objects are the Kubernetes objects of the last applied manifest:
	// what the Helm uninstall or Argo CD's prune removes.
	// +kubebuilder:validation:MaxItems=1000
	// +listType=atomic
	// +optional
	Objects []ObjectReference `json:"objects,omitempty"`

	// ObjectsTruncated counts objects left out past MaxItems.
	// +optional
	ObjectsTruncated int32 `json:"objectsTruncated,omitempty"`

	// Application is the Argo CD Application deleted (delivery argocd).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Application string `json:"application,omitempty"`

	// Terraform is the stack the destroy plan was made for, as it was at
	// the applied revision; the plan file is applied to it.
	// +optional
	Terraform *TerraformSource `json:"terraform,omitempty"`
}

// DeletionStatus records how far an approved Delete change got. Each step
// is recorded once it is done, so an operator restarted in the middle
// carries on with the next step and never repeats a finished one.
type DeletionStatus struct {
	// WorkloadRemovedAt is when the Helm release was uninstalled (or the
	// Argo CD Application and its resources were gone).
	// +optional
	WorkloadRemovedAt *metav1.Time `json:"workloadRemovedAt,omitempty"`
	// InfrastructureDestroyedAt is when the approved destroy plan was
	// applied (set without a plan too: nothing to destroy).
	// +optional
	InfrastructureDestroyedAt *metav1.Time `json:"infrastructureDestroyedAt,omitempty"`
	// ReleaseDeletedAt is when the Terraform state and the Release were
	// deleted.
	// +optional
	ReleaseDeletedAt *metav1.Time `json:"releaseDeletedAt,omitempty"`
}

// IsDelete reports whether the change removes its release.
func (c *ChangeRequest) IsDelete() bool { return c.Spec.Operation == OperationDelete }

// OperationOf is the change's operation, Apply when unset.
func (c *ChangeRequest) OperationOf() Operation {
	if c.Spec.Operation == "" {
		return OperationApply
	}
	return c.Spec.Operation
}
