package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// VerificationSpec says how a release is verified after it was applied:
// its health first, then metric checks against Prometheus, then a soak
// time. It is written per environment in service.yaml (with defaults in
// the Repository), resolved by the syncer and carried on the change, so
// it is part of the approvalDigest: weakening a check is a change to
// approve.
type VerificationSpec struct {
	// HealthTimeout bounds how long the applied objects may take to become
	// current (kstatus) before the verification fails.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	HealthTimeout *metav1.Duration `json:"healthTimeout,omitempty"`

	// SoakTime is how long the release must stay good after the last
	// check passed before it is Verified.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	SoakTime *metav1.Duration `json:"soakTime,omitempty"`

	// PrometheusURL is the Prometheus the metric checks query
	// (http:// or https://).
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:Pattern=`^https?://`
	// +optional
	PrometheusURL string `json:"prometheusURL,omitempty"`

	// Checks are the metric checks, all of which must pass.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Checks []MetricCheck `json:"checks,omitempty"`
}

// NoDataPolicy is what a check does with a query that returns no series
// (or NaN): never a silent pass.
// +kubebuilder:validation:Enum=fail;inconclusive
type NoDataPolicy string

const (
	// NoDataFail counts a measurement without data as a failure.
	NoDataFail NoDataPolicy = "fail"
	// NoDataInconclusive stops the verification and asks a person.
	NoDataInconclusive NoDataPolicy = "inconclusive"
)

// MetricCheck is one PromQL query measured Count times, Interval apart.
type MetricCheck struct {
	// Name names the check in the measurements.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// Query is a PromQL instant query returning one series (or a
	// scalar). It is a Go template over .Release, .Namespace, .Revision
	// and .AppliedAt (RFC 3339), e.g. {namespace="{{ .Namespace }}"}.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`

	// SuccessCondition is a comparison of `result` with a number, e.g.
	// "result < 0.005"; a measurement meeting it is successful.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	SuccessCondition string `json:"successCondition,omitempty"`

	// FailureCondition is a comparison like SuccessCondition; a
	// measurement meeting it failed. With both set, one meeting neither
	// is inconclusive; with one set, the other is its negation.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	FailureCondition string `json:"failureCondition,omitempty"`

	// Interval between measurements (default 1m).
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +optional
	Interval *metav1.Duration `json:"interval,omitempty"`

	// Count is how many measurements are taken (default 1).
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	Count int32 `json:"count,omitempty"`

	// FailureLimit is how many failed measurements are tolerated; one
	// more fails the verification (default 0).
	// +kubebuilder:validation:Minimum=0
	// +optional
	FailureLimit int32 `json:"failureLimit,omitempty"`

	// InconclusiveLimit is how many inconclusive measurements are
	// tolerated (counted, neither passing nor failing); one more stops the
	// verification and asks a person (default 0: the first one does).
	// +kubebuilder:validation:Minimum=0
	// +optional
	InconclusiveLimit int32 `json:"inconclusiveLimit,omitempty"`

	// NoData is what a measurement without data counts as: fail (the
	// default) or inconclusive.
	// +optional
	NoData NoDataPolicy `json:"noData,omitempty"`
}

// MeasurementPhase is what one measurement found.
// +kubebuilder:validation:Enum=Successful;Failed;Inconclusive;Error
type MeasurementPhase string

const (
	// MeasurementSuccessful met the success condition.
	MeasurementSuccessful MeasurementPhase = "Successful"
	// MeasurementFailed met the failure condition (or had no data under
	// noData: fail).
	MeasurementFailed MeasurementPhase = "Failed"
	// MeasurementInconclusive met neither condition, or had no data under
	// noData: inconclusive.
	MeasurementInconclusive MeasurementPhase = "Inconclusive"
	// MeasurementError: Prometheus could not be asked or refused the
	// query; it is retried at the next interval and counts as a failure.
	MeasurementError MeasurementPhase = "Error"
)

// Measurement is one query result, kept as evidence.
type Measurement struct {
	// Check is the check's name.
	// +kubebuilder:validation:MaxLength=63
	Check string `json:"check"`
	// Query is the query as sent (templates filled in).
	// +kubebuilder:validation:MaxLength=4096
	Query string `json:"query"`
	// Value is the result as Prometheus returned it ("" without data).
	// +kubebuilder:validation:MaxLength=64
	// +optional
	Value string `json:"value,omitempty"`
	// Phase is what the measurement counted as.
	Phase MeasurementPhase `json:"phase"`
	// Message says why, for anything but a success.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Message string `json:"message,omitempty"`
	// Time is when it was taken (microseconds: intervals may be short).
	Time metav1.MicroTime `json:"time"`
}

// CheckStatus counts the measurements of one check.
type CheckStatus struct {
	// Name is the check's name.
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`
	// Measured counts the measurements taken.
	// +optional
	Measured int32 `json:"measured,omitempty"`
	// Failed counts the failed (and errored) measurements.
	// +optional
	Failed int32 `json:"failed,omitempty"`
	// Inconclusive counts the inconclusive measurements.
	// +optional
	Inconclusive int32 `json:"inconclusive,omitempty"`
	// LastAt is when the last measurement was taken; the next is due an
	// interval later (microseconds, so a restart keeps the interval).
	// +optional
	LastAt *metav1.MicroTime `json:"lastAt,omitempty"`
}

// MaxMeasurements is how many measurements a ChangeRequest keeps (the
// newest).
const MaxMeasurements = 30

// VerificationStatus is the progress and the evidence of a verification.
// Everything a restart needs is here: the start time, the counts and
// when each check was last measured.
type VerificationStatus struct {
	// StartedAt is when the verification started (the change was
	// applied).
	StartedAt metav1.Time `json:"startedAt"`
	// HealthyAt is when every applied object was first found current.
	// +optional
	HealthyAt *metav1.Time `json:"healthyAt,omitempty"`
	// ChecksPassedAt is when the last check finished passing; the soak
	// time runs from here.
	// +optional
	ChecksPassedAt *metav1.Time `json:"checksPassedAt,omitempty"`
	// FinishedAt is when the verification ended.
	// +optional
	FinishedAt *metav1.Time `json:"finishedAt,omitempty"`
	// Checks counts each check's measurements.
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	// +optional
	Checks []CheckStatus `json:"checks,omitempty"`
	// Measurements are the newest MaxMeasurements measurements, oldest
	// first.
	// +kubebuilder:validation:MaxItems=30
	// +listType=atomic
	// +optional
	Measurements []Measurement `json:"measurements,omitempty"`
	// MeasurementsDropped counts older measurements left out.
	// +optional
	MeasurementsDropped int32 `json:"measurementsDropped,omitempty"`
	// Message says how the verification stands.
	// +kubebuilder:validation:MaxLength=2048
	// +optional
	Message string `json:"message,omitempty"`
	// Settled records the person who ended an inconclusive verification
	// (kubectl sluice verify settle), with why.
	// +optional
	Settled *VerificationSettlement `json:"settled,omitempty"`
}

// VerificationSettlement is a person's decision on an inconclusive
// verification, taken from their Approval (decision verify-pass or
// verify-fail) on the change.
type VerificationSettlement struct {
	// Approval names the Approval that settled it.
	// +kubebuilder:validation:MaxLength=253
	Approval string `json:"approval"`
	// Approver is who settled it.
	Approver Identity `json:"approver"`
	// Decision is verify-pass or verify-fail.
	Decision Decision `json:"decision"`
	// Reason is the Approval's comment: why.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Reason string `json:"reason,omitempty"`
	// At is when the verification was settled.
	At metav1.Time `json:"at"`
}

// ConditionVerified (ChangeRequest): how its verification stands.
const ConditionVerified = "Verified"

// Reasons of the Verified condition and the verification phases.
const (
	// ReasonVerifying: the verification is under way.
	ReasonVerifying = "Verifying"
	// ReasonVerificationPassed: health, every check and the soak time
	// passed.
	ReasonVerificationPassed = "VerificationPassed"
	// ReasonUnhealthy: an applied object failed (kstatus), or a pod of the
	// release is in a state it does not leave by itself.
	ReasonUnhealthy = "Unhealthy"
	// ReasonHealthTimeout: the applied objects were not current within
	// healthTimeout.
	ReasonHealthTimeout = "HealthTimeout"
	// ReasonChecksFailed: a metric check failed more often than its
	// failureLimit allows.
	ReasonChecksFailed = "ChecksFailed"
	// ReasonInconclusive: a measurement was inconclusive; the
	// verification stops and a person decides.
	ReasonInconclusive = "Inconclusive"
	// ReasonSettledPass: a person settled an inconclusive verification as
	// passed.
	ReasonSettledPass = "SettledPass"
	// ReasonSettledFail: a person settled an inconclusive verification as
	// failed.
	ReasonSettledFail = "SettledFail"
	// ReasonInvalidVerification: the verification spec cannot be run.
	ReasonInvalidVerification = "InvalidVerification"
)
