package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Decision is an approver's decision on a change.
// +kubebuilder:validation:Enum=approve;reject;revoke;verify-pass;verify-fail
type Decision string

const (
	// DecisionApprove counts towards the rule's required approvals.
	DecisionApprove Decision = "approve"
	// DecisionReject vetoes the change while it stands.
	DecisionReject Decision = "reject"
	// DecisionRevoke withdraws the approver's earlier decision.
	DecisionRevoke Decision = "revoke"
	// DecisionVerifyPass settles the inconclusive verification of the
	// change it names (ChangeRequest) as passed: Verified. It is no
	// approval: the gate never counts it.
	DecisionVerifyPass Decision = "verify-pass"
	// DecisionVerifyFail settles it as failed: VerificationFailed.
	DecisionVerifyFail Decision = "verify-fail"
)

// Settles reports whether d settles a verification rather than deciding
// on the change (the gate ignores such decisions).
func (d Decision) Settles() bool { return d == DecisionVerifyPass || d == DecisionVerifyFail }

// ApprovalSource says where an Approval came from.
// +kubebuilder:validation:Enum=kubernetes;pull-request
type ApprovalSource string

const (
	// SourceKubernetes is an Approval created through the API server, such as
	// with kubectl sluice approve.
	SourceKubernetes ApprovalSource = "kubernetes"
	// SourcePullRequest is an Approval the syncer made from a PR review.
	SourcePullRequest ApprovalSource = "pull-request"
)

// ApprovalSpec is one approver's decision on one change. Immutable.
//
// An approve counts only for the change it was given on (ChangeRequest), or
// for the tracked-branch change that merged the pull request whose preview
// it was given on (ChangeRequestSpec.MergedPullRequests), and only while
// the approvalDigest is that change's: never for a later change that
// happens to bring back the same content. A reject vetoes the content (the
// release and approvalDigest) for every change that carries it, and is
// kept as long as the content can come back. A revoke withdraws the
// approver's earlier decisions on the content.
// +kubebuilder:validation:XValidation:rule="self.source != 'kubernetes' || self.approver.startsWith('k8s:')",message="an Approval from source kubernetes needs a k8s: approver"
// +kubebuilder:validation:XValidation:rule="self.source != 'pull-request' || (has(self.pullRequest) && has(self.reviewID))",message="an Approval from a pull request needs pullRequest and reviewID"
// +kubebuilder:validation:XValidation:rule="!has(self.changeRequest) || self.changeRequest.startsWith(self.release + '-')",message="changeRequest must name a change of the Approval's release (<release>-...)"
type ApprovalSpec struct {
	// Release is the name of the Release in this namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Release string `json:"release"`

	// ChangeRequest is the name of the change (in this namespace) the
	// decision was given on: for a pull-request review, the preview of the
	// reviewed commit. An approve counts for that change, or for the
	// change of the tracked branch that merged the preview's pull request,
	// and for no other; an approve without it counts for nothing. Admission
	// requires it on every Approval from source kubernetes.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	ChangeRequest string `json:"changeRequest,omitempty"`

	// ApprovalDigest is the digest of the change decided on.
	ApprovalDigest Digest `json:"approvalDigest"`

	// Decision is approve, reject or revoke.
	Decision Decision `json:"decision"`

	// Approver is who decided.
	Approver Identity `json:"approver"`

	// Groups are the approver's Kubernetes groups at the time, stamped from
	// the request by admission; k8s-group: approvers match them.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=253
	// +optional
	Groups []string `json:"groups,omitempty"`

	// Source is kubernetes or pull-request.
	Source ApprovalSource `json:"source"`

	// Comment from the approver.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Comment string `json:"comment,omitempty"`

	// PullRequest is the pull request number of a review.
	// +kubebuilder:validation:Minimum=1
	// +optional
	PullRequest int64 `json:"pullRequest,omitempty"`

	// ReviewID is the provider's id of the review.
	// +kubebuilder:validation:Minimum=1
	// +optional
	ReviewID int64 `json:"reviewID,omitempty"`
}

// Approval is an immutable decision on a change.
// +kubebuilder:object:root=true
// +kubebuilder:resource:shortName=appr,categories=sluice
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="Approval spec is immutable"
// +kubebuilder:printcolumn:name="Release",type=string,JSONPath=`.spec.release`
// +kubebuilder:printcolumn:name="Decision",type=string,JSONPath=`.spec.decision`
// +kubebuilder:printcolumn:name="Approver",type=string,JSONPath=`.spec.approver`
// +kubebuilder:printcolumn:name="Source",type=string,JSONPath=`.spec.source`
// +kubebuilder:printcolumn:name="Change",type=string,JSONPath=`.spec.changeRequest`,priority=1
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.spec.approvalDigest`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:selectablefield:JSONPath=`.spec.approvalDigest`
type Approval struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ApprovalSpec `json:"spec"`
}

// ApprovalList is a list of Approvals.
// +kubebuilder:object:root=true
type ApprovalList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Approval `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Approval{}, &ApprovalList{})
}
