package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NamespacePattern is a glob over namespace names: lower-case letters,
// digits and dashes, with * (any run of characters) and ? (one character).
// +kubebuilder:validation:Pattern=`^[-a-z0-9*?]+$`
// +kubebuilder:validation:MaxLength=63
type NamespacePattern string

// ApprovalPolicySpec is a platform admins' floor for the approval rule of the
// Releases it selects among the Releases of its own (control) namespace.
//
// A policy has two forms of selection, and selects a Release when either
// form that it sets selects it:
//
//   - the namespace form (namespaces, namespaceSelector) selects every
//     Release whose target namespace matches a glob of namespaces or whose
//     Namespace object's labels match namespaceSelector, whatever the
//     Release's environment name or labels: those are written by whoever
//     pushes to the repository, the target namespace is what is protected;
//   - the release form (environments, releaseSelector) selects a Release
//     whose environment is in environments (empty: any) and whose labels
//     match releaseSelector (unset: any).
//
// A policy that sets neither form selects every Release of its namespace.
// A policy that sets only the namespace form never selects by environment.
//
// A Release new to its target namespace (its last applied change, if any,
// went to another namespace) is judged by the strictest rule of every policy
// that selects that namespace: the namespace-form policies matching it, the
// release-form policies selecting any other Release of this namespace that
// targets it, and the applied rules of those Releases. A new name is not a
// new start.
// +kubebuilder:validation:XValidation:rule="!has(self.namespaceSelector) || (has(self.namespaceSelector.matchLabels) && size(self.namespaceSelector.matchLabels) > 0) || (has(self.namespaceSelector.matchExpressions) && size(self.namespaceSelector.matchExpressions) > 0)",message="namespaceSelector must set matchLabels or matchExpressions; to select every namespace leave out all selectors"
type ApprovalPolicySpec struct {
	// Environments selects Releases by environment name; empty selects every
	// environment. Environment names are chosen by whoever pushes: protect
	// a namespace with the namespace form instead.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Environments []EnvironmentName `json:"environments,omitempty"`

	// ReleaseSelector selects Releases by label; unset selects every Release.
	// A Release must match both Environments and ReleaseSelector.
	// +optional
	ReleaseSelector *metav1.LabelSelector `json:"releaseSelector,omitempty"`

	// Namespaces selects every Release whose target namespace matches one
	// of these globs (e.g. "*-prod"), whatever its environment or labels.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Namespaces []NamespacePattern `json:"namespaces,omitempty"`

	// NamespaceSelector selects every Release whose target Namespace object
	// has matching labels, whatever the Release's environment or labels. A
	// namespace that does not exist has no labels. A selector that does not
	// parse selects every Release (the floor fails closed).
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// Rule is the floor: the effective rule of a selected change is at least
	// this strict.
	Rule ApprovalRule `json:"rule"`
}

// ApprovalPolicy sets the minimum approval rule for the Releases it selects.
// The syncer never writes it.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=ap,categories=sluice
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`
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
