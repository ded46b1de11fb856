package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ChartSource is where a release's Helm chart comes from: a folder in the
// repository, or a chart repository.
// +kubebuilder:validation:XValidation:rule="[has(self.path), has(self.repo), has(self.kustomize), has(self.manifests)].filter(x, x).size() == 1",message="exactly one of path, repo, kustomize or manifests must be set"
// +kubebuilder:validation:XValidation:rule="!has(self.repo) || (has(self.name) && has(self.version))",message="a chart repository needs name and version"
type ChartSource struct {
	// Path of the chart folder, relative to the repository root.
	// +optional
	Path RelativePath `json:"path,omitempty"`

	// Repo is a chart repository URL.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https|oci)://`
	// +optional
	Repo string `json:"repo,omitempty"`

	// Name of the chart in Repo.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Name string `json:"name,omitempty"`

	// Version of the chart in Repo: in a Release, as the manifest says (an
	// exact version or a semver range); in a ChangeRequest, the one exact
	// version the syncer resolved it to.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Version string `json:"version,omitempty"`

	// Digest of the chart in Repo, set in a ChangeRequest: the sha256 of
	// the .tgz for a Helm repository, the manifest digest for an OCI
	// registry. The chart's bytes travel in the artifact, so
	// contentDigest, and through it approvalDigest, binds them; the
	// validator and the Helm applier check them against this digest.
	// +optional
	Digest Digest `json:"digest,omitempty"`

	// Kustomize, when set, is the Kustomize overlay the release deploys
	// instead of a chart; Sluice builds it in-process and installs the
	// output as a generated chart.
	// +optional
	Kustomize *KustomizeSource `json:"kustomize,omitempty"`

	// Manifests, when set, is the folder of plain manifests the release
	// deploys instead of a chart, installed as a generated chart.
	// +optional
	Manifests *ManifestsSource `json:"manifests,omitempty"`
}

// Generated reports whether the release deploys a chart Sluice generates
// from a Kustomize overlay or a manifests folder.
func (c ChartSource) Generated() bool {
	return c.Kustomize != nil || c.Manifests != nil
}

// IsSet reports whether the source names anything to install: a chart
// folder, a chart repository, an overlay or a manifests folder.
func (c ChartSource) IsSet() bool {
	return c.Path != "" || c.Repo != "" || c.Generated()
}

// KustomizeSource is a Kustomize overlay in the repository.
type KustomizeSource struct {
	// Path of the overlay folder, relative to the repository root.
	Path RelativePath `json:"path"`
}

// ManifestsSource is a folder of plain YAML/JSON manifests in the
// repository.
type ManifestsSource struct {
	// Path of the folder, relative to the repository root.
	Path RelativePath `json:"path"`
	// Recurse reads subfolders too.
	// +optional
	Recurse bool `json:"recurse,omitempty"`
	// Include are glob patterns selecting files (all *.yaml, *.yml and
	// *.json when empty).
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Include []string `json:"include,omitempty"`
	// Exclude are glob patterns of files left out.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	Exclude []string `json:"exclude,omitempty"`
}

// TerraformSource is the Terraform stack of a release.
type TerraformSource struct {
	// Dir is the stack's folder, relative to the repository root.
	Dir RelativePath `json:"dir"`

	// Vars are the environment's Terraform variables.
	// +kubebuilder:validation:MaxProperties=256
	// +optional
	Vars map[string]string `json:"vars,omitempty"`

	// Workspace is the Terraform workspace.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9_-]*$`
	// +kubebuilder:validation:MaxLength=90
	// +optional
	Workspace string `json:"workspace,omitempty"`
}

// ReleaseSpec is one service in one environment, written by the syncer from
// the service manifest.
type ReleaseSpec struct {
	// Repository is the name of the Repository the release comes from.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Repository string `json:"repository"`

	// Service is the service name from the manifest.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=42
	Service string `json:"service"`

	// Environment is the environment name from the manifest.
	Environment EnvironmentName `json:"environment"`

	// SourcePath is the service folder, relative to the repository root.
	SourcePath RelativePath `json:"sourcePath"`

	// TargetNamespace is where the workload is deployed.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	TargetNamespace string `json:"targetNamespace"`

	// Chart is the Helm chart.
	Chart ChartSource `json:"chart"`

	// Values are the values files in order, relative to the service folder.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	Values []RelativePath `json:"values,omitempty"`

	// Terraform is the release's Terraform stack, if any.
	// +optional
	Terraform *TerraformSource `json:"terraform,omitempty"`

	// Delivery is how the chart is applied.
	// +kubebuilder:default=helm
	// +optional
	Delivery Delivery `json:"delivery,omitempty"`

	// Rule is the approval rule from the manifest.
	// +optional
	Rule ApprovalRule `json:"rule,omitempty"`

	// Owners are the owning teams from the manifest.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Owners []string `json:"owners,omitempty"`
}

// ReleaseHistoryEntry is one change that reached a terminal phase.
type ReleaseHistoryEntry struct {
	// ChangeRequest is the change's name.
	ChangeRequest string `json:"changeRequest"`
	// Revision is the change's commit.
	Revision string `json:"revision"`
	// Phase is the terminal phase.
	Phase ChangeRequestPhase `json:"phase"`
	// ApprovalDigest of the change.
	// +optional
	ApprovalDigest Digest `json:"approvalDigest,omitempty"`
	// FinishedAt is when the change reached the phase.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// VerifiedChange names a change that was applied and verified.
type VerifiedChange struct {
	// ChangeRequest is the change's name.
	ChangeRequest string `json:"changeRequest"`
	// Revision is the change's commit.
	// +optional
	Revision string `json:"revision,omitempty"`
	// ApprovalDigest of the change.
	// +optional
	ApprovalDigest Digest `json:"approvalDigest,omitempty"`
	// ContentDigest of the change.
	// +optional
	ContentDigest Digest `json:"contentDigest,omitempty"`
	// VerifiedAt is when its verification passed.
	// +optional
	VerifiedAt *metav1.Time `json:"verifiedAt,omitempty"`
}

// MaxQuarantine is how many failed changes a Release's quarantine keeps.
const MaxQuarantine = 16

// QuarantineEntry is a change whose verification failed.
type QuarantineEntry struct {
	// ChangeRequest is the failed change's name.
	ChangeRequest string `json:"changeRequest"`
	// ApprovalDigest of the failed change.
	ApprovalDigest Digest `json:"approvalDigest"`
	// ContentDigest of the failed change: the same content pushed again
	// (under another commit, or with another plan) is caught by it.
	// +optional
	ContentDigest Digest `json:"contentDigest,omitempty"`
	// At is when the failure was recorded.
	// +optional
	At *metav1.Time `json:"at,omitempty"`
}

// RollbackDecision is what the operator decided when a change failed its
// verification.
type RollbackDecision struct {
	// Of is the change whose verification failed.
	Of string `json:"of"`
	// To is the verified change to return to; empty when there is no
	// rollback.
	// +optional
	To string `json:"to,omitempty"`
	// Requested is true when a rollback was asked of the syncer (the
	// Release annotation AnnotationRollbackPrefix+Of).
	// +optional
	Requested bool `json:"requested,omitempty"`
	// Reason is a RolledBack condition reason.
	Reason string `json:"reason"`
	// Message says why.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// DecidedAt is when the decision was taken.
	// +optional
	DecidedAt *metav1.Time `json:"decidedAt,omitempty"`
}

// ReleaseStatus is what has been synced and applied for a release.
type ReleaseStatus struct {
	// ObservedGeneration is the generation the operator's conditions describe.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Progressing, Degraded and Drifted, written by the
	// operator;
	// Synced and Orphaned, written by the syncer.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastSyncedTree is the hash of the release's inputs at the last commit
	// the syncer processed for it.
	// +optional
	LastSyncedTree string `json:"lastSyncedTree,omitempty"`

	// LastSyncedCommit is the commit LastSyncedTree was computed at.
	// +optional
	LastSyncedCommit string `json:"lastSyncedCommit,omitempty"`

	// LatestChange is the newest ChangeRequest the syncer created.
	// +optional
	LatestChange string `json:"latestChange,omitempty"`

	// CurrentChange is the ChangeRequest holding the apply lock.
	// +optional
	CurrentChange string `json:"currentChange,omitempty"`

	// AppliedChange is the last ChangeRequest applied.
	// +optional
	AppliedChange string `json:"appliedChange,omitempty"`

	// AppliedRevision is the commit of the last applied change.
	// +optional
	AppliedRevision string `json:"appliedRevision,omitempty"`

	// AppliedDigest is the approvalDigest of the last applied change.
	// +optional
	AppliedDigest Digest `json:"appliedDigest,omitempty"`

	// AppliedRule is the manifest rule of the last applied change. A later
	// change is judged by at least this rule, so a push can tighten the rule
	// but never loosen it for itself; once applied, its own rule is in force.
	// +optional
	AppliedRule *ApprovalRule `json:"appliedRule,omitempty"`

	// AppliedTargetNamespace is the target namespace of the last applied
	// change. A change to any other namespace is new to it and judged by
	// the strictest rule protecting that namespace (see ApprovalPolicy).
	// +optional
	AppliedTargetNamespace string `json:"appliedTargetNamespace,omitempty"`

	// DeletedBy is the approved Delete ChangeRequest that removed this
	// release, set by the operator right before it deletes the Release, so
	// the finalizer knows the workload and the Terraform state are gone
	// already.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	DeletedBy string `json:"deletedBy,omitempty"`

	// Drift is the result of the last drift check, while the live state
	// differs from the last applied change (see the Drifted condition).
	// +optional
	Drift *DriftStatus `json:"drift,omitempty"`

	// LastVerified is the last change of the release that was applied and
	// Verified: what a rollback returns to.
	// +optional
	LastVerified *VerifiedChange `json:"lastVerified,omitempty"`

	// Quarantine lists the changes whose verification failed, newest
	// first (at most MaxQuarantine): a change with one of their
	// approvalDigests or content digests is never auto-approved.
	// +kubebuilder:validation:MaxItems=16
	// +optional
	Quarantine []QuarantineEntry `json:"quarantine,omitempty"`

	// Rollback is the operator's last rollback decision, taken when a
	// change failed its verification.
	// +optional
	Rollback *RollbackDecision `json:"rollback,omitempty"`

	// History is the newest terminal changes, newest first.
	// +kubebuilder:validation:MaxItems=20
	// +optional
	History []ReleaseHistoryEntry `json:"history,omitempty"`
}

// Field selectors on Releases (selectable fields of the CRD, and indexes of
// the same names in the operator's cache): the gate reads only the
// Releases that target, or last applied to, a change's target namespace.
const (
	// FieldTargetNamespace selects Releases by spec.targetNamespace.
	FieldTargetNamespace = "spec.targetNamespace"
	// FieldAppliedTargetNamespace selects Releases by
	// status.appliedTargetNamespace.
	FieldAppliedTargetNamespace = "status.appliedTargetNamespace"
)

// Release is one service in one environment.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=rel,categories=sluice
// +kubebuilder:printcolumn:name="Service",type=string,JSONPath=`.spec.service`
// +kubebuilder:printcolumn:name="Env",type=string,JSONPath=`.spec.environment`
// +kubebuilder:printcolumn:name="Delivery",type=string,JSONPath=`.spec.delivery`
// +kubebuilder:printcolumn:name="Applied",type=string,JSONPath=`.status.appliedRevision`
// +kubebuilder:printcolumn:name="Current",type=string,JSONPath=`.status.currentChange`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.targetNamespace`
// +kubebuilder:selectablefield:JSONPath=`.status.appliedTargetNamespace`
type Release struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ReleaseSpec   `json:"spec"`
	Status ReleaseStatus `json:"status,omitempty"`
}

// ReleaseList is a list of Releases.
// +kubebuilder:object:root=true
type ReleaseList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Release `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Release{}, &ReleaseList{})
}
