package v1alpha1

import "strings"

// Identity is a prefixed principal: k8s:<username>, k8s-group:<group>,
// github:<login>, gitlab:<username>, gitea:<username> or email:<address>.
// +kubebuilder:validation:Pattern=`^(k8s|k8s-group|github|gitlab|gitea|email):[^\s:][^\s]*$`
// +kubebuilder:validation:MaxLength=320
type Identity string

// Digest is "sha256:" followed by 64 lower-case hex digits.
// +kubebuilder:validation:Pattern=`^sha256:[a-f0-9]{64}$`
// +kubebuilder:validation:MaxLength=71
type Digest string

// RelativePath is a slash-separated path inside a repository or artifact: not
// absolute and without ".." segments.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=512
// +kubebuilder:validation:XValidation:rule="!self.startsWith('/')",message="path must be relative, not absolute"
// +kubebuilder:validation:XValidation:rule="!self.matches('(^|/)\\\\.\\\\.(/|$)')",message="path must not contain '..' segments"
type RelativePath string

// EnvironmentName names an environment of a service: lower-case letters and
// digits only, so "<service>-<environment>" stays unambiguous.
// +kubebuilder:validation:Pattern=`^[a-z0-9]+$`
// +kubebuilder:validation:MaxLength=20
type EnvironmentName string

// Risk is the validator's risk level for a change.
// +kubebuilder:validation:Enum=low;medium;high
type Risk string

const (
	// RiskLow is a change to images, replicas, resources or config data only.
	RiskLow Risk = "low"
	// RiskMedium is a change that creates new objects or resources.
	RiskMedium Risk = "medium"
	// RiskHigh is a change to RBAC, CRDs, webhooks, network policies, or a
	// deletion or replacement of stateful or protected resources.
	RiskHigh Risk = "high"
)

// AutoApproveRisk is the highest risk that may pass the gate without
// approvals; "none" turns auto-approval off.
// +kubebuilder:validation:Enum=none;low;medium;high
type AutoApproveRisk string

const (
	// AutoApproveNone never auto-approves.
	AutoApproveNone AutoApproveRisk = "none"
	// AutoApproveLow auto-approves low-risk changes.
	AutoApproveLow AutoApproveRisk = "low"
	// AutoApproveMedium auto-approves low- and medium-risk changes.
	AutoApproveMedium AutoApproveRisk = "medium"
	// AutoApproveHigh auto-approves every change that has no deny finding.
	AutoApproveHigh AutoApproveRisk = "high"
)

// Delivery says how a release's Helm chart reaches the cluster.
// +kubebuilder:validation:Enum=helm;argocd
type Delivery string

const (
	// DeliveryHelm installs with the embedded Helm SDK.
	DeliveryHelm Delivery = "helm"
	// DeliveryArgoCD drives an Argo CD Application pinned to the approved SHA.
	DeliveryArgoCD Delivery = "argocd"
)

// OrDefault is d, or helm when d is empty (the API's default).
func (d Delivery) OrDefault() Delivery {
	if d == "" {
		return DeliveryHelm
	}
	return d
}

// ApprovalRule says who must approve a change before it is applied.
type ApprovalRule struct {
	// Required is the number of distinct allowed approvers needed.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Required int32 `json:"required,omitempty"`

	// Approvers lists who may approve; empty means anyone allowed to approve
	// (RBAC for k8s: identities, write access for pull-request reviews).
	// +kubebuilder:validation:MaxItems=100
	// +listType=set
	// +optional
	Approvers []Identity `json:"approvers,omitempty"`

	// AllowAuthor lets an author of the change approve it.
	// +optional
	AllowAuthor bool `json:"allowAuthor,omitempty"`

	// AutoApproveRisk is the highest risk that passes without approvals.
	// +kubebuilder:default=none
	// +optional
	AutoApproveRisk AutoApproveRisk `json:"autoApproveRisk,omitempty"`

	// NoApprovers says that nobody may approve: only auto-approval can pass
	// the gate. The operator sets it on an effective rule whose approver lists
	// have nobody in common (so an empty Approvers list can never turn into
	// "anyone"); an ApprovalPolicy may set it to freeze manual approvals.
	// +optional
	NoApprovers bool `json:"noApprovers,omitempty"`

	// AllOf lists further approver lists that an approver must also be in.
	// The operator writes it on an effective rule combined from rules with
	// different approver lists: an approver then has to be allowed by
	// Approvers and by every list here (k8s-group: entries matching the
	// groups stamped on the Approval), which no single list can express.
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +optional
	AllOf []ApproverList `json:"allOf,omitempty"`

	// Rollback says whether a rollback (a change that returns the release
	// to its last verified change after a failed verification) may pass
	// without approvals: "auto" lets one through when its content is
	// exactly the verified content it returns to (and, for Terraform, its
	// fresh plan destroys and replaces nothing); "approval" (the default)
	// judges it like any change. When rules combine, approval wins.
	// +kubebuilder:default=approval
	// +optional
	Rollback RollbackMode `json:"rollback,omitempty"`
}

// RollbackMode says how a rollback passes the gate.
// +kubebuilder:validation:Enum=auto;approval
type RollbackMode string

const (
	// RollbackAuto lets an exact rollback to verified content pass without
	// approvals.
	RollbackAuto RollbackMode = "auto"
	// RollbackApproval judges a rollback like any change (the default).
	RollbackApproval RollbackMode = "approval"
)

// OrDefault is m, or approval when m is empty or unknown (the API's
// default, and the strictest value).
func (m RollbackMode) OrDefault() RollbackMode {
	if m == RollbackAuto {
		return RollbackAuto
	}
	return RollbackApproval
}

// ApproverList is one list of approver identities.
// +kubebuilder:validation:MaxItems=100
// +listType=atomic
type ApproverList []Identity

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the referent.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// caseInsensitivePrefixes are the identity kinds whose names the providers
// treat as case-insensitive (logins, user names, e-mail addresses).
var caseInsensitivePrefixes = []string{"github:", "gitlab:", "gitea:", "email:"}

// Canonical returns the identity in the form used for comparisons: provider
// logins and e-mail addresses lower-cased, Kubernetes users and groups (which
// are case-sensitive) unchanged.
func (i Identity) Canonical() Identity {
	for _, p := range caseInsensitivePrefixes {
		if strings.HasPrefix(string(i), p) {
			return Identity(strings.ToLower(string(i)))
		}
	}
	return i
}

// Delivery is how the release reaches the cluster, defaulting to helm.
func (r *Release) Delivery() Delivery { return r.Spec.Delivery.OrDefault() }

// Delivery is how the change reaches the cluster, defaulting to helm.
func (cr *ChangeRequest) Delivery() Delivery { return cr.Spec.Delivery.OrDefault() }
