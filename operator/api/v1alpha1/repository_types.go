package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GitReference selects the branch or tag a Repository tracks.
// +kubebuilder:validation:XValidation:rule="has(self.branch) != has(self.tag)",message="exactly one of branch or tag must be set"
type GitReference struct {
	// Branch to track.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Branch string `json:"branch,omitempty"`

	// Tag to track.
	// +kubebuilder:validation:MaxLength=255
	// +optional
	Tag string `json:"tag,omitempty"`
}

// GroupKind names a kind by API group ("" for the core group) and kind.
type GroupKind struct {
	// Group is the API group, "" for the core group (e.g.
	// rbac.authorization.k8s.io).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self == '' || self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')",message="group must be empty or a DNS subdomain"
	// +optional
	Group string `json:"group"`

	// Kind is the kind's exact name, e.g. ClusterRoleBinding.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Z][A-Za-z0-9]*$')",message="kind must be a kind name such as ClusterRole"
	Kind string `json:"kind"`
}

// String is "kind.group" (kubectl's form), or the kind alone in the core group.
func (g GroupKind) String() string {
	if g.Group == "" {
		return g.Kind
	}
	return g.Kind + "." + g.Group
}

// PreviewPolicy says which pull requests get preview ChangeRequests.
// +kubebuilder:validation:Enum=none;sameRepo;all
type PreviewPolicy string

const (
	// PreviewsNone builds no previews.
	PreviewsNone PreviewPolicy = "none"
	// PreviewsSameRepo builds previews for pull requests from branches of the
	// repository itself, never from forks.
	PreviewsSameRepo PreviewPolicy = "sameRepo"
	// PreviewsAll also builds previews for pull requests from forks, whose
	// Terraform code then runs in the syncer.
	PreviewsAll PreviewPolicy = "all"
)

// RepositorySpec is an infra repository Sluice watches.
type RepositorySpec struct {
	// URL of the git repository: https://, http://, ssh:// or scp-like
	// git@host:path; file:// only where the syncer allows it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^((https?|ssh|file)://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:)`
	URL string `json:"url"`

	// Ref is the branch or tag to track.
	// +kubebuilder:default={branch: main}
	// +optional
	Ref *GitReference `json:"ref,omitempty"`

	// Interval between polls of the remote head.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="interval must be positive"
	// +kubebuilder:default="1m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Timeout for each git operation.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) > duration('0s')",message="timeout must be positive"
	// +kubebuilder:default="60s"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`

	// SecretRef names a Secret with git credentials: username and password
	// (or password alone as a token) for HTTPS; identity and known_hosts for
	// SSH.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`

	// ChartRepositories say how to reach, and whether to verify, the
	// chart repositories (https:// Helm repositories, oci:// registries)
	// its services' charts come from: credentials as Flux's
	// HelmRepository secretRef (the Secret's username and password keys),
	// and a signature every chart from there must carry. A service folder
	// never carries credentials or keys. Kustomize overlays may inflate
	// charts (helmCharts) only from the repositories listed here.
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +optional
	ChartRepositories []ChartRepository `json:"chartRepositories,omitempty"`

	// WebhookSecretRef names a Secret whose "token" key signs webhooks.
	// +optional
	WebhookSecretRef *LocalObjectReference `json:"webhookSecretRef,omitempty"`

	// ServicesPath is the folder holding one folder per service.
	// +kubebuilder:default=services
	// +optional
	ServicesPath RelativePath `json:"servicesPath,omitempty"`

	// TargetNamespaces are the glob patterns of namespaces the repository's
	// services may deploy to.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	TargetNamespaces []string `json:"targetNamespaces"`

	// ServiceAccountName is the ServiceAccount, in the control namespace, that
	// the operator impersonates to apply this repository's changes.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	ServiceAccountName string `json:"serviceAccountName"`

	// KustomizeRemoteBases are the git repositories (https://, ssh:// or
	// file:// URLs, or prefixes of several at a "/") whose commits the
	// overlays of this repository may use as remote bases, each with the
	// credentials to fetch them if they are private. A remote base must be
	// pinned (<URL>//<folder>?ref=<40 hex>); the syncer fetches it at that
	// commit into the artifact, so its content is approved with the rest.
	// Empty (the default) refuses every remote base.
	// +kubebuilder:validation:MaxItems=32
	// +listType=map
	// +listMapKey=url
	// +optional
	KustomizeRemoteBases []KustomizeRemoteBase `json:"kustomizeRemoteBases,omitempty"`

	// AllowedExtraNamespaces are glob patterns (as targetNamespaces) of the
	// namespaces, besides a release's own target namespace, that its rendered
	// objects may name in metadata.namespace. Empty means every object stays
	// in its release's target namespace: the validator denies the rest and
	// the Helm applier refuses it (OutsideNamespace).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self.all(p, p.matches('^[a-z0-9*?-]+$'))",message="allowedExtraNamespaces holds namespace names or globs of [a-z0-9-] with * and ?"
	// +listType=set
	// +optional
	AllowedExtraNamespaces []string `json:"allowedExtraNamespaces,omitempty"`

	// AllowedClusterKinds are the cluster-scoped kinds (API group and kind,
	// by name) the repository's charts may create. Empty means none: the
	// validator denies every cluster-scoped object, and every custom kind
	// whose scope it cannot know, and the Helm applier refuses them
	// (OutsideNamespace).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:XValidation:rule="self.all(x, self.exists_one(y, y.group == x.group && y.kind == x.kind))",message="allowedClusterKinds lists each group and kind once"
	// +listType=atomic
	// +optional
	AllowedClusterKinds []GroupKind `json:"allowedClusterKinds,omitempty"`

	// Prune deletes Releases whose service left the repository.
	// +optional
	Prune bool `json:"prune,omitempty"`

	// Previews says which pull requests get preview ChangeRequests.
	// +kubebuilder:default=sameRepo
	// +optional
	Previews PreviewPolicy `json:"previews,omitempty"`

	// Suspend stops polling and syncing.
	// +optional
	Suspend bool `json:"suspend,omitempty"`

	// Drift is the drift detection of the repository's releases (off by
	// default). Accepting a drift is a commit to git.
	// +optional
	Drift *DriftPolicy `json:"drift,omitempty"`

	// Verification holds the defaults of every release's verification;
	// an environment's verification block in service.yaml overrides them
	// field by field (its checks replace the default checks). Only
	// releases whose environment has a verification block, or a
	// Repository with defaults, are verified.
	// +optional
	Verification *VerificationSpec `json:"verification,omitempty"`
}

// RepositoryStatus is what the syncer last saw of a Repository.
type RepositoryStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Conditions: Ready, Stalled, Reconciling; ShardAvailable on a
	// Repository with a shard key (written by the unsharded syncer).
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// LastFetchedCommit is the remote head last fetched.
	// +optional
	LastFetchedCommit string `json:"lastFetchedCommit,omitempty"`

	// LastSyncedCommit is the commit whose releases were all processed.
	// +optional
	LastSyncedCommit string `json:"lastSyncedCommit,omitempty"`

	// WebhookPath is this repository's webhook path on the receiver.
	// +optional
	WebhookPath string `json:"webhookPath,omitempty"`

	// LastHandledReconcileAt is the last value of the reconcile-requested
	// annotation the syncer handled.
	// +optional
	LastHandledReconcileAt string `json:"lastHandledReconcileAt,omitempty"`

	// Pushes are the recent verified pushes of the tracked ref, oldest
	// first: the head each push left and who pushed it, as the provider
	// authenticated them (the webhook's sender). Written by the webhook
	// receiver after the signature check. A change of the branch records
	// the pusher of every commit since the release's last applied revision
	// in spec.pushers, so the gate's author exclusion covers the person,
	// whatever commit e-mail they typed.
	// +kubebuilder:validation:MaxItems=100
	// +listType=atomic
	// +optional
	Pushes []PushRecord `json:"pushes,omitempty"`
}

// PushRecord is one verified push of a Repository's tracked ref.
type PushRecord struct {
	// Commit is the head the push left.
	// +kubebuilder:validation:Pattern=`^[a-f0-9]{40}([a-f0-9]{24})?$`
	Commit string `json:"commit"`

	// Pusher is the provider identity that pushed ("github:<login>").
	Pusher Identity `json:"pusher"`

	// ReceivedAt is when the webhook delivery was received.
	// +optional
	ReceivedAt *metav1.Time `json:"receivedAt,omitempty"`
}

// Repository is an infra repository whose services Sluice delivers.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=repo;repos,categories=sluice
// +kubebuilder:printcolumn:name="URL",type=string,JSONPath=`.spec.url`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Commit",type=string,JSONPath=`.status.lastSyncedCommit`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].message`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Repository struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   RepositorySpec   `json:"spec"`
	Status RepositoryStatus `json:"status,omitempty"`
}

// RepositoryList is a list of Repositories.
// +kubebuilder:object:root=true
type RepositoryList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Repository `json:"items"`
}

// Defaults used when a Repository was not defaulted by the API server (for
// example one built in Go and never stored).
const (
	DefaultBranch   = "main"
	DefaultInterval = time.Minute
	DefaultTimeout  = time.Minute
)

// GetRef returns the tracked reference, defaulting to the main branch.
func (r *Repository) GetRef() GitReference {
	if r.Spec.Ref == nil || (r.Spec.Ref.Branch == "" && r.Spec.Ref.Tag == "") {
		return GitReference{Branch: DefaultBranch}
	}
	return *r.Spec.Ref
}

// TrackedRef is the full ref name the Repository tracks ("refs/heads/main",
// "refs/tags/v1"). The syncer's poll and its webhook receiver both compare
// with it: if they disagreed, pushes would be dropped silently.
func (r *Repository) TrackedRef() string {
	ref := r.GetRef()
	if ref.Tag != "" {
		return "refs/tags/" + ref.Tag
	}
	return "refs/heads/" + ref.Branch
}

// DefaultServicesPath is the services folder when spec.servicesPath is empty.
const DefaultServicesPath = "services"

// ServicesPath is the folder of the repository holding one folder per
// service, defaulting to "services".
func (r *Repository) ServicesPath() string {
	if r.Spec.ServicesPath == "" {
		return DefaultServicesPath
	}
	return string(r.Spec.ServicesPath)
}

// GetInterval returns the poll interval, defaulting to one minute.
func (r *Repository) GetInterval() time.Duration {
	if r.Spec.Interval == nil || r.Spec.Interval.Duration <= 0 {
		return DefaultInterval
	}
	return r.Spec.Interval.Duration
}

// GetTimeout returns the timeout of one git operation, defaulting to a minute.
func (r *Repository) GetTimeout() time.Duration {
	if r.Spec.Timeout == nil || r.Spec.Timeout.Duration <= 0 {
		return DefaultTimeout
	}
	return r.Spec.Timeout.Duration
}

func init() {
	SchemeBuilder.Register(&Repository{}, &RepositoryList{})
}

// KustomizeRemoteBase is a git repository, or a prefix of several at a
// "/", whose pinned commits overlays may use as remote bases. The entry
// with the longest URL a base's repository is or lies below applies, and
// only its secretRef is used to fetch it.
// +kubebuilder:validation:XValidation:rule="!self.url.matches('^https://[^/]*@')",message="put the credentials of a remote base repository in secretRef, not in its URL"
type KustomizeRemoteBase struct {
	// URL of the git repository (https://, ssh:// or file://), or a
	// prefix of several.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https|ssh|file)://[^?#]+$`
	URL string `json:"url"`
	// SecretRef names the Secret in the Repository's namespace with the
	// git credentials for the repositories under URL, in the keys of
	// spec.secretRef: username and password (or password alone as a
	// token) or bearerToken for HTTPS; identity and known_hosts for SSH.
	// They are sent to those repositories only, never to the Repository's
	// own remote or another base's.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// ChartRepository is what the Repository says about the chart
// repositories whose URL starts with URL (the longest matching URL
// applies): the credentials that go with requests to them, and the
// signature their charts must carry before they enter an artifact. An
// entry (a URL alone for a public repository) is also what lets the
// overlays' Kustomize helmCharts inflate charts from there.
// +kubebuilder:validation:XValidation:rule="!has(self.verify) || self.verify.provider != 'cosign' || self.url.startsWith('oci://')",message="cosign verifies charts from oci:// registries only; use provider provenance for a Helm repository"
type ChartRepository struct {
	// URL is a chart repository URL or a prefix of several.
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^(https|oci)://[^@]+$`
	URL string `json:"url"`
	// SecretRef names the Secret in the Repository's namespace holding
	// the username and password keys.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// Verify, when set, makes every chart from these repositories prove
	// its origin before it is used: a chart with no signature, or one no
	// key of the Secret verifies, proposes nothing for its service.
	// +optional
	Verify *ChartVerification `json:"verify,omitempty"`
}

// ChartSignatureProvider is how a chart's signature is verified.
// +kubebuilder:validation:Enum=provenance;cosign
type ChartSignatureProvider string

const (
	// ChartSignatureProvenance verifies Helm's provenance file: the
	// chart's .prov beside it in a Helm repository (or its provenance
	// layer in an OCI registry), an OpenPGP clear-signature naming the
	// chart archive's sha256, by a key of the Secret's "keyring" (an
	// OpenPGP public keyring, binary or armored).
	ChartSignatureProvenance ChartSignatureProvider = "provenance"
	// ChartSignatureCosign verifies a cosign signature of the chart's OCI
	// manifest (the sha256-<hex>.sig tag of its repository) by one of the
	// Secret's public keys (PEM, every key ending in ".pub").
	ChartSignatureCosign ChartSignatureProvider = "cosign"
)

// ChartVerification names the signature charts must carry and the keys
// that may make it.
type ChartVerification struct {
	// Provider is provenance (Helm's .prov) or cosign (oci:// only).
	Provider ChartSignatureProvider `json:"provider"`
	// SecretRef names the Secret in the Repository's namespace holding the
	// keys: "keyring" for provenance, "*.pub" for cosign.
	SecretRef LocalObjectReference `json:"secretRef"`
}
