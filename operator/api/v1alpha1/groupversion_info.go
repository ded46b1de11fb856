// Package v1alpha1 contains the Sluice API: Repository, ApprovalPolicy,
// Release, ChangeRequest and Approval in the gitops.sluice.dev group.
//
// +kubebuilder:object:generate=true
// +groupName=gitops.sluice.dev
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of every Sluice kind.
	GroupVersion = schema.GroupVersion{Group: "gitops.sluice.dev", Version: "v1alpha1"}

	// SchemeBuilder registers the Sluice kinds with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Sluice kinds to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
