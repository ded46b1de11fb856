package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ChangeRequestPhase is where a change stands at the gate.
// +kubebuilder:validation:Enum=Pending;Rejected;AwaitingApproval;Approved;Applying;Applied;Verifying;Verified;VerificationFailed;Failed;Superseded;Preview
type ChangeRequestPhase string

const (
	// PhasePending: not yet looked at by the operator.
	PhasePending ChangeRequestPhase = "Pending"
	// PhaseRejected: a deny finding or a standing reject; terminal.
	PhaseRejected ChangeRequestPhase = "Rejected"
	// PhaseAwaitingApproval: valid, waiting for approvals.
	PhaseAwaitingApproval ChangeRequestPhase = "AwaitingApproval"
	// PhaseApproved: the gate passed; waiting for the release's apply lock.
	PhaseApproved ChangeRequestPhase = "Approved"
	// PhaseApplying: handed to an applier.
	PhaseApplying ChangeRequestPhase = "Applying"
	// PhaseApplied: the applier finished; terminal unless the change
	// carries a verification, which starts at once (Verifying).
	PhaseApplied ChangeRequestPhase = "Applied"
	// PhaseVerifying: applied; its health and metric checks are measured.
	// The change keeps the release's apply lock meanwhile.
	PhaseVerifying ChangeRequestPhase = "Verifying"
	// PhaseVerified: applied and verified; terminal.
	PhaseVerified ChangeRequestPhase = "Verified"
	// PhaseVerificationFailed: applied, and its verification failed;
	// terminal.
	PhaseVerificationFailed ChangeRequestPhase = "VerificationFailed"
	// PhaseFailed: the applier or a verification failed; terminal.
	PhaseFailed ChangeRequestPhase = "Failed"
	// PhaseSuperseded: a newer change for the release went first; terminal.
	PhaseSuperseded ChangeRequestPhase = "Superseded"
	// PhasePreview: a pull-request head, never applied; terminal.
	PhasePreview ChangeRequestPhase = "Preview"
)

// LabelMergedAs on a preview ChangeRequest names the commit its pull request
// was merged as; the syncer reads the pull request's author and pushers from
// such previews for the merge commit's changes, then deletes them.
const LabelMergedAs = "gitops.sluice.dev/merged-as"

// ReasonUnchanged (Release Synced condition and Event): the release's inputs
// changed but its rendered manifest and plan equal the applied revision's,
// so no ChangeRequest was made and nothing waits for approval.
const ReasonUnchanged = "Unchanged"

// IsTerminal reports whether the phase never changes again.
func (p ChangeRequestPhase) IsTerminal() bool {
	switch p {
	case PhaseRejected, PhaseApplied, PhaseFailed, PhaseSuperseded, PhasePreview, PhaseVerified, PhaseVerificationFailed:
		return true
	}
	return false
}

// WasApplied reports whether the change's content reached the cluster:
// Applied, and the verification phases that follow it.
func (p ChangeRequestPhase) WasApplied() bool {
	switch p {
	case PhaseApplied, PhaseVerifying, PhaseVerified, PhaseVerificationFailed:
		return true
	}
	return false
}

// Severity of a validation finding.
// +kubebuilder:validation:Enum=deny;warn;unverifiable;info
type Severity string

const (
	// SeverityDeny blocks the change.
	SeverityDeny Severity = "deny"
	// SeverityWarn is shown but does not block.
	SeverityWarn Severity = "warn"
	// SeverityUnverifiable means a check depends on a value unknown until
	// apply; it blocks auto-approval.
	SeverityUnverifiable Severity = "unverifiable"
	// SeverityInfo is informational.
	SeverityInfo Severity = "info"
)

// VerdictResult summarises the findings.
// +kubebuilder:validation:Enum=pass;warn;fail
type VerdictResult string

const (
	// VerdictPass: no deny or warn finding.
	VerdictPass VerdictResult = "pass"
	// VerdictWarn: warnings but no deny finding.
	VerdictWarn VerdictResult = "warn"
	// VerdictFail: at least one deny finding.
	VerdictFail VerdictResult = "fail"
)

// Finding is one result of a policy or validation check. Secret values are
// redacted before a finding is recorded.
type Finding struct {
	// Severity of the finding.
	Severity Severity `json:"severity"`
	// Source is what produced it: terraform, helm, policy or manifest.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Source string `json:"source,omitempty"`
	// Policy is the rule or package that produced it.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Policy string `json:"policy,omitempty"`
	// Resource is the Terraform address or Kubernetes object it is about.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Resource string `json:"resource,omitempty"`
	// Message says what is wrong.
	// +kubebuilder:validation:MaxLength=2048
	Message string `json:"message"`
	// File and Line locate it in the repository, where known.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	File string `json:"file,omitempty"`
	// +optional
	Line int32 `json:"line,omitempty"`
}

// Verdict is the validator's decision on a change.
type Verdict struct {
	// Result summarises the findings.
	Result VerdictResult `json:"result"`
	// Risk is the change's risk level.
	Risk Risk `json:"risk"`
	// Findings are the individual results.
	// +kubebuilder:validation:MaxItems=500
	// +optional
	Findings []Finding `json:"findings,omitempty"`
	// FindingsTruncated counts findings left out past MaxItems.
	// +optional
	FindingsTruncated int32 `json:"findingsTruncated,omitempty"`
}

// PlanSummary counts a Terraform plan's actions.
type PlanSummary struct {
	// +optional
	Add int32 `json:"add,omitempty"`
	// +optional
	Change int32 `json:"change,omitempty"`
	// +optional
	Destroy int32 `json:"destroy,omitempty"`
	// +optional
	Replace int32 `json:"replace,omitempty"`
}

// PullRequestRef ties a change to a pull request.
type PullRequestRef struct {
	// Number of the pull request.
	// +kubebuilder:validation:Minimum=1
	Number int64 `json:"number"`
	// HeadSHA is the pull request head commit.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{40}([a-f0-9]{24})?$`
	HeadSHA string `json:"headSHA"`
	// Preview marks a change built from a pull-request head; it is never
	// applied.
	// +optional
	Preview bool `json:"preview,omitempty"`
	// Fork marks a pull request from another repository.
	// +optional
	Fork bool `json:"fork,omitempty"`
}

// ArtifactReference is where the change's content can be downloaded.
type ArtifactReference struct {
	// URL of the .tar.gz artifact.
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`
	// SHA256 of the .tar.gz.
	SHA256 Digest `json:"sha256"`
}

// ChangeRequestSpec is the immutable record of one release at one revision.
type ChangeRequestSpec struct {
	// Release is the name of the Release in this namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Release string `json:"release"`

	// Operation is Apply (install or upgrade, the default) or Delete
	// (remove the release); it is part of approvalDigest.
	// +kubebuilder:default=Apply
	// +optional
	Operation Operation `json:"operation,omitempty"`

	// Deletion says what a Delete change removes.
	// +optional
	Deletion *DeletionSpec `json:"deletion,omitempty"`

	// Revision is the commit the change was built from.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{40}([a-f0-9]{24})?$`
	Revision string `json:"revision"`

	// Attempt is 1 for the first plan at a revision, 2 for "-r2" and so on.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:default=1
	// +optional
	Attempt int32 `json:"attempt,omitempty"`

	// PreviousRevision is the revision the change was computed against.
	// +kubebuilder:validation:Pattern=`^([a-f0-9]{40}([a-f0-9]{24})?)?$`
	// +optional
	PreviousRevision string `json:"previousRevision,omitempty"`

	// Authors are the PR author and the commit authors and committers since
	// the last applied revision.
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +optional
	Authors []Identity `json:"authors,omitempty"`

	// CommitMessage of the revision, first 4 KiB.
	// +kubebuilder:validation:MaxLength=4096
	// +optional
	CommitMessage string `json:"commitMessage,omitempty"`

	// PullRequest is set for changes built from a pull request.
	// +optional
	PullRequest *PullRequestRef `json:"pullRequest,omitempty"`

	// PullRequestAuthor is the provider identity ("github:<login>",
	// "gitea:<login>", "gitlab:<login>") of the author of the pull request
	// this change was built from (previews) or merged through (changes of
	// the tracked branch whose commits came from a pull request the syncer
	// previewed). The gate's author exclusion (allowAuthor: false) treats
	// it, and every identity mapped to the same person, as an author.
	// +optional
	PullRequestAuthor Identity `json:"pullRequestAuthor,omitempty"`

	// Pushers are the provider identities of the people who pushed to that
	// pull request (the sender of each opened, reopened and synchronize
	// event the syncer handled), in the order first seen. Commit author
	// and committer e-mails are in Authors. The gate's author exclusion
	// treats every pusher as an author.
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +optional
	Pushers []Identity `json:"pushers,omitempty"`

	// MergedPullRequests are the numbers of the previewed pull requests
	// this change of the tracked branch merges: their head commits are in
	// the history of Revision and were not in the history of the Release's
	// applied revision (merge commits and fast-forwards; squash and rebase
	// merges rewrite the head and are not found). An approve given on a
	// preview of one of them counts for this change when the
	// approvalDigest is the same; see ApprovalSpec.ChangeRequest.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Minimum=1
	// +listType=set
	// +optional
	MergedPullRequests []int64 `json:"mergedPullRequests,omitempty"`

	// Source is what the appliers act on: the service folder, chart, values
	// files and Terraform stack, as the manifest at Revision said. Appliers,
	// drift, audit and deletion read these fields (and the Release's applied
	// status), never the Release's spec, which every push rewrites. A change
	// recorded without it is refused by the operator (InvalidSpec).
	// +optional
	Source *ChangeSource `json:"source,omitempty"`

	// TargetNamespace is the workload's namespace, from the manifest.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	TargetNamespace string `json:"targetNamespace"`

	// Delivery is how the chart is applied, from the manifest.
	// +kubebuilder:default=helm
	// +optional
	Delivery Delivery `json:"delivery,omitempty"`

	// Artifact is the downloadable content.
	Artifact ArtifactReference `json:"artifact"`

	// ContentDigest is the sha256 of the uncompressed deterministic tar.
	ContentDigest Digest `json:"contentDigest"`

	// ManifestDigest is the sha256 of the rendered Helm manifests.
	// +optional
	ManifestDigest Digest `json:"manifestDigest,omitempty"`

	// PlanDigest is the semantic digest of the Terraform plan.
	// +optional
	PlanDigest Digest `json:"planDigest,omitempty"`

	// PlanFileSHA256 is the sha256 of the stored plan file.
	// +optional
	PlanFileSHA256 Digest `json:"planFileSHA256,omitempty"`

	// PlanSummary counts the plan's actions.
	// +optional
	PlanSummary *PlanSummary `json:"planSummary,omitempty"`

	// Verdict is the validator's decision.
	Verdict Verdict `json:"verdict"`

	// Rule is the approval rule in the manifest at this revision.
	// +optional
	Rule ApprovalRule `json:"rule,omitempty"`

	// ApprovalDigest binds approvals to this exact content; see
	// ComputeApprovalDigest.
	ApprovalDigest Digest `json:"approvalDigest"`

	// Verification is how the change is verified after it is applied:
	// the environment's verification block in service.yaml over the
	// Repository's defaults, as the syncer resolved them. It is part of
	// approvalDigest. Without it the change ends Applied.
	// +optional
	Verification *VerificationSpec `json:"verification,omitempty"`

	// Rollback marks a change the syncer built, on the operator's request,
	// to return the release to its last verified change after a change
	// failed its verification. It is part of approvalDigest: a change can
	// only claim to be a rollback where that claim is what was digested
	// (and approved).
	// +optional
	Rollback *RollbackSpec `json:"rollback,omitempty"`

	// PolicyBundleDigest is the digest of the policy bundle the syncer's
	// validator judged this change with (every policy and data file, by
	// path, sorted; see policy.BundleDigest). It records which rules the
	// verdict came from; it is not part of approvalDigest, since the
	// policies decide the verdict, not what is applied.
	// +optional
	PolicyBundleDigest Digest `json:"policyBundleDigest,omitempty"`
}

// RollbackSpec names the change a rollback undoes and the verified change
// it returns to.
type RollbackSpec struct {
	// Of is the ChangeRequest whose verification failed.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Of string `json:"of"`
	// To is the verified ChangeRequest whose revision the rollback was
	// built from.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	To string `json:"to"`
}

// ChangeSource is the release's source as recorded at a change's revision:
// everything an applier reads to know what to apply and how.
type ChangeSource struct {
	// Service is the service name from the manifest.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=42
	Service string `json:"service"`

	// Environment is the environment name from the manifest.
	Environment EnvironmentName `json:"environment"`

	// Path is the service folder, relative to the repository root.
	Path RelativePath `json:"path"`

	// Chart is the Helm chart.
	Chart ChartSource `json:"chart"`

	// HelmCharts are the charts the Kustomize overlay's helmCharts entries
	// resolved to (repository, name, exact version and digest), fetched by
	// the syncer into the artifact (.sluice/kustomize-charts/), so the
	// contentDigest binds their bytes. A record for the review, rollbacks
	// and rebuilds: builds read the artifact's bytes only.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	HelmCharts []ChartSource `json:"helmCharts,omitempty"`

	// Values are the values files in order, relative to the service folder.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	Values []RelativePath `json:"values,omitempty"`

	// Terraform is the release's Terraform stack, if any.
	// +optional
	Terraform *TerraformSource `json:"terraform,omitempty"`
}

// ApplyResult is what the applier reported.
type ApplyResult struct {
	// Applier is the applier's name (helm, argocd, terraform).
	// +optional
	Applier string `json:"applier,omitempty"`
	// HelmRevision is the Helm release revision installed.
	// +optional
	HelmRevision int32 `json:"helmRevision,omitempty"`
	// Terraform is the Terraform state the apply left, read by the runner
	// right after terraform applied the plan (or found it in place).
	// +optional
	Terraform *TerraformApplyResult `json:"terraform,omitempty"`
	// Message is the applier's summary.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Message string `json:"message,omitempty"`
	// StartedAt is when the applier was called.
	// +optional
	StartedAt *metav1.Time `json:"startedAt,omitempty"`
	// FinishedAt is when it returned.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
}

// TerraformApplyResult identifies the Terraform state an apply left, so
// that `kubectl sluice audit` can prove later, from the state Secret alone,
// that the state is still the one the approved plan produced.
type TerraformApplyResult struct {
	// Lineage is the state's lineage (it changes only when a state is
	// created anew).
	// +kubebuilder:validation:MaxLength=64
	Lineage string `json:"lineage"`
	// Serial is the state's serial after the apply; terraform raises it on
	// every write that changes the state.
	// +kubebuilder:validation:Minimum=0
	Serial int64 `json:"serial"`
	// ResourcesDigest is the sha256 of the state's resources (every
	// instance's address and attributes, as the state stores them,
	// canonical JSON; see terraform.StateResourcesDigest).
	ResourcesDigest Digest `json:"resourcesDigest"`
	// Resources counts the resource instances in the state.
	// +optional
	Resources int32 `json:"resources,omitempty"`
}

// ChangeRequestStatus is written only by the operator.
type ChangeRequestStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Phase is where the change stands.
	// +optional
	Phase ChangeRequestPhase `json:"phase,omitempty"`

	// Conditions: Validated, Approved, Applied, Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// EffectiveRule is the strictest of the matching ApprovalPolicies, the
	// release's applied rule and the change's own rule.
	// +optional
	EffectiveRule *ApprovalRule `json:"effectiveRule,omitempty"`

	// Approvals counts the distinct allowed approvers with a standing approve.
	// +optional
	Approvals int32 `json:"approvals,omitempty"`

	// ApprovedBy lists those approvers.
	// +optional
	ApprovedBy []Identity `json:"approvedBy,omitempty"`

	// RejectedBy lists approvers with a standing reject.
	// +optional
	RejectedBy []Identity `json:"rejectedBy,omitempty"`

	// ApprovedAt is when the gate passed.
	// +optional
	ApprovedAt *metav1.Time `json:"approvedAt,omitempty"`

	// Apply is the applier's result.
	// +optional
	Apply *ApplyResult `json:"apply,omitempty"`

	// Deletion records the finished steps of a Delete change.
	// +optional
	Deletion *DeletionStatus `json:"deletion,omitempty"`

	// Verification is the progress and evidence of the verification.
	// +optional
	Verification *VerificationStatus `json:"verification,omitempty"`
}

// ChangeRequest is one release at one revision, held at the approval gate.
// Its spec is immutable.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=cr;change;changes,categories=sluice
// +kubebuilder:validation:XValidation:rule="self.spec == oldSelf.spec",message="ChangeRequest spec is immutable"
// +kubebuilder:printcolumn:name="Release",type=string,JSONPath=`.spec.release`
// +kubebuilder:printcolumn:name="Operation",type=string,JSONPath=`.spec.operation`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Revision",type=string,JSONPath=`.spec.revision`
// +kubebuilder:printcolumn:name="Risk",type=string,JSONPath=`.spec.verdict.risk`
// +kubebuilder:printcolumn:name="Verdict",type=string,JSONPath=`.spec.verdict.result`
// +kubebuilder:printcolumn:name="Approvals",type=integer,JSONPath=`.status.approvals`
// +kubebuilder:printcolumn:name="Required",type=integer,JSONPath=`.status.effectiveRule.required`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.spec.approvalDigest`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ChangeRequest struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ChangeRequestSpec   `json:"spec"`
	Status ChangeRequestStatus `json:"status,omitempty"`
}

// ChangeRequestList is a list of ChangeRequests.
// +kubebuilder:object:root=true
type ChangeRequestList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ChangeRequest `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ChangeRequest{}, &ChangeRequestList{})
}
