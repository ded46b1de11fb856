package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ApprovalPolicySpec is a platform admins' floor for the approval rule of the
// Releases it selects in its namespace.
type ApprovalPolicySpec struct {
	// Environments selects Releases by environment name; empty selects every
	// environment.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Environments []EnvironmentName `json:"environments,omitempty"`

	// ReleaseSelector selects Releases by label; unset selects every Release.
	// A Release must match both Environments and ReleaseSelector.
	// +optional
	ReleaseSelector *metav1.LabelSelector `json:"releaseSelector,omitempty"`

	// Rule is the floor: the effective rule of a selected change is at least
	// this strict.
	Rule ApprovalRule `json:"rule"`
}

// ApprovalPolicy sets the minimum approval rule for the Releases it selects.
// The syncer never writes it.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=ap,categories=sluice
// +kubebuilder:printcolumn:name="Environments",type=string,JSONPath=`.spec.environments`
// +kubebuilder:printcolumn:name="Required",type=integer,JSONPath=`.spec.rule.required`
// +kubebuilder:printcolumn:name="Auto-Approve",type=string,JSONPath=`.spec.rule.autoApproveRisk`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ApprovalPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ApprovalPolicySpec `json:"spec"`
}

// ApprovalPolicyList is a list of ApprovalPolicies.
// +kubebuilder:object:root=true
type ApprovalPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApprovalPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ApprovalPolicy{}, &ApprovalPolicyList{})
}
