package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PersonSpec lists the identities of one person.
type PersonSpec struct {
	// Identities are every identity of the person: e-mail addresses
	// (email:), provider logins (github:, gitlab:, gitea:) and Kubernetes
	// users (k8s:). Groups (k8s-group:) are not people and are refused.
	// An identity listed by two Persons joins them into one person for
	// the gate (the safe reading of a mistake).
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(i, !i.startsWith('k8s-group:'))",message="a k8s-group: entry is a group, not an identity of one person"
	// +listType=set
	Identities []Identity `json:"identities"`
}

// Person maps one person's identities to one name, so that the gate treats
// them as one: an author is excluded from approving under every identity,
// and one person's approvals under several identities count once. Written
// by platform admins (cluster-scoped), never by the syncer or by the people
// it names.
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=person,categories=sluice
// +kubebuilder:printcolumn:name="Identities",type=string,JSONPath=`.spec.identities`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Person struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec PersonSpec `json:"spec"`
}

// PersonList is a list of Persons.
// +kubebuilder:object:root=true
type PersonList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Person `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Person{}, &PersonList{})
}
