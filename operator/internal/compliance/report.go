package compliance

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"time"

	openreports "github.com/openreports/reports-api/apis/openreports.io/v1alpha1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

const (
	// ReportName is the name of the Report in each target namespace.
	ReportName = "sluice-compliance"
	// Source is the Report's source.
	Source = "sluice"
	// LabelManagedBy marks the Reports Sluice writes.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// AnnotationBundleDigest is the policyBundleDigest the Report's results
	// came from.
	AnnotationBundleDigest = "gitops.sluice.dev/policy-bundle-digest"
	// AnnotationOmitted counts the results left out of the Report by its
	// limits (the summary still counts them).
	AnnotationOmitted = "gitops.sluice.dev/omitted-results"

	// DefaultMaxResults is the default limit on a Report's results.
	DefaultMaxResults = 1000
	// DefaultMaxBytes bounds a Report's results in bytes of JSON, under
	// etcd's 1.5 MiB request limit with room for the rest of the object.
	DefaultMaxBytes = 1 << 20
	// maxMessage bounds one result's message.
	maxMessage = 1024
)

// Property keys of a result.
const (
	PropertyBundleDigest  = "policyBundleDigest"
	PropertyManaged       = "managed"
	PropertyRelease       = "release"
	PropertyChangeRequest = "changeRequest"
	PropertyApprovers     = "approvers"
)

// Provenance is what Sluice knows of how an object came to be.
type Provenance struct {
	// Release is the Release ("namespace/name") whose applied change
	// holds the object; empty for an object Sluice did not apply.
	Release string
	// ChangeRequest is the applied ChangeRequest ("namespace/name").
	ChangeRequest string
	// Approvers are the identities that approved it.
	Approvers []string
}

// Input is everything one namespace's Report is built from.
type Input struct {
	Namespace    string
	BundleDigest string
	Objects      []*unstructured.Unstructured
	Outcomes     map[types.UID]Outcome
	Combined     Outcome
	// Provenance of an object; nil knows none.
	Provenance func(*unstructured.Unstructured) Provenance
	// Previous is the Report as last written, whose results keep their
	// timestamps; nil for none.
	Previous   *openreports.Report
	Now        time.Time
	MaxResults int
	MaxBytes   int
}

// Build returns the Report of a namespace: every failure, warning and
// error as a result, the most severe first, up to MaxResults and MaxBytes;
// the summary counts all of them whatever the limits (pass: the objects
// with no finding and no error). A result already in Previous keeps its
// timestamp, so an unchanged namespace builds an equal Report.
func Build(in Input) *openreports.Report {
	maxResults, maxBytes := in.MaxResults, in.MaxBytes
	if maxResults <= 0 {
		maxResults = DefaultMaxResults
	}
	if maxBytes <= 0 {
		maxBytes = DefaultMaxBytes
	}
	prov := in.Provenance
	if prov == nil {
		prov = func(*unstructured.Unstructured) Provenance { return Provenance{} }
	}
	byID := make(map[string]*unstructured.Unstructured, len(in.Objects))
	for _, o := range in.Objects {
		byID[objectID(o)] = o
	}
	var results []openreports.ReportResult
	var summary openreports.ReportSummary
	add := func(o *unstructured.Unstructured, pol string, res openreports.Result, msg string) {
		switch res {
		case resultFail:
			summary.Fail++
		case resultWarn:
			summary.Warn++
		case resultError:
			summary.Error++
		}
		results = append(results, result(in, prov, o, pol, res, msg))
	}
	// An object a combined policy found fault with does not pass either.
	inCombined := map[string]bool{}
	for _, f := range in.Combined.Findings {
		inCombined[f.Resource] = true
	}
	for _, o := range in.Objects {
		oc := in.Outcomes[o.GetUID()]
		if len(oc.Findings) == 0 && len(oc.Errors) == 0 {
			if !inCombined[objectID(o)] {
				summary.Pass++
			}
			continue
		}
		for _, f := range oc.Findings {
			add(o, f.Policy, severityResult(f.Severity), f.Message)
		}
		for _, pol := range sortedKeys(oc.Errors) {
			add(o, pol, resultError, oc.Errors[pol])
		}
	}
	for _, f := range in.Combined.Findings {
		add(byID[f.Resource], f.Policy, severityResult(f.Severity), f.Message)
	}
	for _, pol := range sortedKeys(in.Combined.Errors) {
		add(nil, pol, resultError, in.Combined.Errors[pol])
	}
	sort.SliceStable(results, func(i, j int) bool { return less(results[i], results[j]) })

	// Timestamps first: they are part of each result's size.
	carryTimestamps(results, in.Previous, in.Now)
	total := len(results)
	kept, size := 0, 0
	for _, r := range results {
		if kept == maxResults {
			break
		}
		b, _ := json.Marshal(r)
		if size+len(b)+1 > maxBytes {
			break
		}
		size += len(b) + 1
		kept++
	}
	results = results[:kept]

	rep := &openreports.Report{
		TypeMeta: metav1.TypeMeta{APIVersion: openreports.SchemeGroupVersion.String(), Kind: "Report"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        ReportName,
			Namespace:   in.Namespace,
			Labels:      map[string]string{LabelManagedBy: Source},
			Annotations: map[string]string{AnnotationBundleDigest: in.BundleDigest, AnnotationOmitted: strconv.Itoa(total - kept)},
		},
		Source: Source,
		Scope:  &corev1.ObjectReference{APIVersion: "v1", Kind: "Namespace", Name: in.Namespace},
		Configuration: &openreports.ReportConfiguration{Limits: openreports.Limits{
			MaxResults:   maxResults,
			StatusFilter: []openreports.StatusFilter{"fail", "warn", "error"},
		}},
		Summary: summary,
		Results: results,
	}
	return rep
}

// result builds one result about o (nil: the namespace as a whole).
func result(in Input, prov func(*unstructured.Unstructured) Provenance, o *unstructured.Unstructured, pol string, res openreports.Result, msg string) openreports.ReportResult {
	pkg, rule := pol, ""
	if i := strings.LastIndex(pol, "/"); i >= 0 {
		pkg, rule = pol[:i], pol[i+1:]
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	r := openreports.ReportResult{
		Source:      Source,
		Policy:      pkg,
		Rule:        rule,
		Result:      res,
		Scored:      true,
		Description: msg,
		Properties:  map[string]string{PropertyBundleDigest: in.BundleDigest, PropertyManaged: "false"},
	}
	switch res {
	case resultFail:
		r.Severity = severityHigh
	case resultWarn:
		r.Severity = severityMedium
	}
	if o == nil {
		r.Subjects = []corev1.ObjectReference{{APIVersion: "v1", Kind: "Namespace", Name: in.Namespace}}
		return r
	}
	r.Subjects = []corev1.ObjectReference{{APIVersion: o.GetAPIVersion(), Kind: o.GetKind(), Namespace: o.GetNamespace(), Name: o.GetName(), UID: o.GetUID()}}
	if p := prov(o); p.Release != "" {
		r.Properties[PropertyManaged] = "true"
		r.Properties[PropertyRelease] = p.Release
		if p.ChangeRequest != "" {
			r.Properties[PropertyChangeRequest] = p.ChangeRequest
		}
		if len(p.Approvers) > 0 {
			r.Properties[PropertyApprovers] = strings.Join(p.Approvers, ",")
		}
	}
	return r
}

// severityResult maps a finding's severity to a Report result.
func severityResult(s report.Severity) openreports.Result {
	if s == report.SeverityDeny {
		return resultFail
	}
	return resultWarn
}

// rank orders results: errors, failures, warnings.
func rank(r openreports.Result) int {
	switch r {
	case resultError:
		return 0
	case resultFail:
		return 1
	}
	return 2
}

func less(a, b openreports.ReportResult) bool {
	if rank(a.Result) != rank(b.Result) {
		return rank(a.Result) < rank(b.Result)
	}
	if ka, kb := subjectKey(a), subjectKey(b); ka != kb {
		return ka < kb
	}
	if a.Policy+"/"+a.Rule != b.Policy+"/"+b.Rule {
		return a.Policy+"/"+a.Rule < b.Policy+"/"+b.Rule
	}
	return a.Description < b.Description
}

func subjectKey(r openreports.ReportResult) string {
	if len(r.Subjects) == 0 {
		return ""
	}
	s := r.Subjects[0]
	return s.Kind + "/" + s.Namespace + "/" + s.Name
}

// resultKey identifies a result across passes.
func resultKey(r openreports.ReportResult) string {
	uid := ""
	if len(r.Subjects) > 0 {
		uid = string(r.Subjects[0].UID)
	}
	return string(r.Result) + "\x00" + subjectKey(r) + "\x00" + uid + "\x00" + r.Policy + "/" + r.Rule + "\x00" + r.Description
}

// carryTimestamps gives each result the timestamp of the same result in
// prev, or now for a new one.
func carryTimestamps(results []openreports.ReportResult, prev *openreports.Report, now time.Time) {
	old := map[string]metav1.Timestamp{}
	if prev != nil {
		for _, r := range prev.Results {
			old[resultKey(r)] = r.Timestamp
		}
	}
	ts := metav1.Timestamp{Seconds: now.Unix()}
	for i := range results {
		if t, ok := old[resultKey(results[i])]; ok {
			results[i].Timestamp = t
			continue
		}
		results[i].Timestamp = ts
	}
}

// objectID names an object as the policies' findings do.
func objectID(o *unstructured.Unstructured) string {
	if o.GetNamespace() == "" {
		return o.GetKind() + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
}

// The openreports.io values Sluice writes (the module defines none).
const (
	resultFail     openreports.Result         = "fail"
	resultWarn     openreports.Result         = "warn"
	resultError    openreports.Result         = "error"
	severityHigh   openreports.ResultSeverity = "high"
	severityMedium openreports.ResultSeverity = "medium"
)
