package v1alpha1

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// DriftMode says what the operator does about a release whose live state
// no longer matches its last applied change.
// +kubebuilder:validation:Enum=off;warn;revert
type DriftMode string

const (
	// DriftOff checks nothing.
	DriftOff DriftMode = "off"
	// DriftWarn reports drift (the Release's Drifted condition, an Event,
	// the sluice_release_drifted metric) and changes nothing.
	DriftWarn DriftMode = "warn"
	// DriftRevert reports drift and asks for a change that re-applies the
	// last applied revision; with the same approvalDigest the gate lets it
	// through without a new approval.
	DriftRevert DriftMode = "revert"
)

// DefaultDriftInterval is how often a release is checked when the policy
// names no interval.
const DefaultDriftInterval = 10 * time.Minute

// DriftPolicy is a Repository's drift detection.
type DriftPolicy struct {
	// Mode is off, warn or revert.
	// +kubebuilder:default=off
	// +optional
	Mode DriftMode `json:"mode,omitempty"`

	// Interval between two checks of a release.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10s')",message="interval must be at least 10s"
	// +kubebuilder:default="10m"
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`
}

// GetMode returns the mode, off when unset.
func (p *DriftPolicy) GetMode() DriftMode {
	if p == nil || p.Mode == "" {
		return DriftOff
	}
	return p.Mode
}

// GetInterval returns the interval, DefaultDriftInterval when unset.
func (p *DriftPolicy) GetInterval() time.Duration {
	if p == nil || p.Interval == nil || p.Interval.Duration <= 0 {
		return DefaultDriftInterval
	}
	return p.Interval.Duration
}

// DriftChange is how a live object differs from the applied one.
// +kubebuilder:validation:Enum=added;changed;removed
type DriftChange string

const (
	// DriftAdded: the object is live in the release but was not applied.
	DriftAdded DriftChange = "added"
	// DriftChanged: fields of the object differ from the applied ones.
	DriftChanged DriftChange = "changed"
	// DriftRemoved: the applied object is gone.
	DriftRemoved DriftChange = "removed"
)

// DriftedObject is one object (or Terraform resource) that drifted.
type DriftedObject struct {
	// Kind of the object ("terraform" resources carry their address in Name).
	// +kubebuilder:validation:MaxLength=253
	Kind string `json:"kind"`
	// Namespace of the object, empty for cluster-scoped ones.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// Name of the object, or the Terraform resource address.
	// +kubebuilder:validation:MaxLength=1024
	Name string `json:"name"`
	// Change is added, changed or removed.
	Change DriftChange `json:"change"`
	// Fields are the changed field paths (at most 20).
	// +kubebuilder:validation:MaxItems=20
	// +kubebuilder:validation:items:MaxLength=512
	// +optional
	Fields []string `json:"fields,omitempty"`
}

// MaxDriftedObjects is how many drifted objects a Release's status lists.
const MaxDriftedObjects = 50

// DriftStatus is the result of the last drift check of a release.
type DriftStatus struct {
	// Change is the applied ChangeRequest the live state was compared with.
	// +kubebuilder:validation:MaxLength=253
	// +optional
	Change string `json:"change,omitempty"`
	// Objects are the drifted objects, at most 50.
	// +kubebuilder:validation:MaxItems=50
	// +optional
	Objects []DriftedObject `json:"objects,omitempty"`
	// Truncated counts drifted objects left out of Objects.
	// +optional
	Truncated int32 `json:"truncated,omitempty"`
	// RevertRequested is the re-plan value the operator set on the Release
	// to have the applied revision applied again (mode revert).
	// +kubebuilder:validation:MaxLength=253
	// +optional
	RevertRequested string `json:"revertRequested,omitempty"`
}
