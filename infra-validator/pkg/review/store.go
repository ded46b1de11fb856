package review

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// A Section is stored beside its ChangeRequest, so `kubectl sluice diff`
// shows the same plan and manifest diff as the pull request: a ConfigMap
// named ConfigMapName(change), controlled by the ChangeRequest, labelled
// LabelReview, holding Encode(section) under DataKey. A ConfigMap, not a
// Secret: the section holds exactly what the pull-request comment shows
// (redacted already, readable by anyone who reads the pull request), and
// the users' roles may then read it without reading any Secret of the
// control namespace. `diff` reads it only when the ChangeRequest controls
// it, so a planted ConfigMap of the same name shows nothing.
const (
	DataKey = "section.json.gz"
	// LabelReview marks those ConfigMaps; admission lets only the syncer
	// write one (policy sluice-reviews).
	LabelReview = "gitops.sluice.dev/review"
	// AnnotationApprovalDigest is the approvalDigest of the change a
	// review was stored for; diff shows a review only when it is the
	// change's.
	AnnotationApprovalDigest = "gitops.sluice.dev/approval-digest"
	// maxDecoded caps what Decode inflates.
	maxDecoded = 64 << 20
	// MaxStored is how much of a ConfigMap's 1 MiB the encoded section
	// may take; a larger one is stored without its plan attributes and
	// manifest diff lines (see Trim).
	MaxStored = 900 << 10
)

// ConfigMapName is the name of the ConfigMap holding a change's section.
func ConfigMapName(change string) string { return change + "-review" }

// NewConfigMap is the ConfigMap that stores s for cr, controlled by cr.
// A section too large for one ConfigMap is stored trimmed (Trim).
func NewConfigMap(cr *sluicev1.ChangeRequest, s *Section) (*corev1.ConfigMap, error) {
	data, err := Encode(s)
	if err != nil {
		return nil, err
	}
	if len(data) > MaxStored {
		if data, err = Encode(Trim(s)); err != nil {
			return nil, err
		}
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: ConfigMapName(cr.Name), Namespace: cr.Namespace,
			Labels:          map[string]string{LabelReview: "true", sluicev1.LabelRelease: cr.Spec.Release},
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(cr, sluicev1.GroupVersion.WithKind("ChangeRequest"))},
		},
		BinaryData: map[string][]byte{DataKey: data},
	}
	// The review goes with its change's shard.
	sluicev1.SetShard(cm, sluicev1.ShardOf(cr))
	return cm, nil
}

// FromConfigMap reads the section stored in cm for cr; false when cr does
// not control cm (a ConfigMap someone else made under that name).
func FromConfigMap(cm *corev1.ConfigMap, cr *sluicev1.ChangeRequest) (*Section, bool, error) {
	if !metav1.IsControlledBy(cm, cr) {
		return nil, false, nil
	}
	s, err := Decode(cm.BinaryData[DataKey])
	return s, true, err
}

// Trim is s without plan attributes and manifest diff lines, for a
// section too large to store: the resources and objects stay listed, and
// Trimmed says where the rest is.
func Trim(s *Section) *Section {
	t := *s
	if s.Plan != nil {
		p := *s.Plan
		p.Resources = make([]Resource, len(s.Plan.Resources))
		for i, r := range s.Plan.Resources {
			p.Resources[i] = Resource{Address: r.Address, Action: r.Action}
		}
		t.Plan = &p
	}
	t.Objects = make([]ObjectDiff, len(s.Objects))
	for i, o := range s.Objects {
		t.Objects[i] = ObjectDiff{ID: o.ID, Status: o.Status}
	}
	t.Trimmed = true
	return &t
}

// Encode is a Section as gzip-compressed JSON.
func Encode(s *Section) ([]byte, error) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if err := json.NewEncoder(zw).Encode(s); err != nil {
		return nil, fmt.Errorf("encode the review: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("encode the review: %w", err)
	}
	return buf.Bytes(), nil
}

// Decode reads what Encode wrote.
func Decode(data []byte) (*Section, error) {
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("read the stored review: %w", err)
	}
	var s Section
	if err := json.NewDecoder(io.LimitReader(zr, maxDecoded)).Decode(&s); err != nil {
		return nil, fmt.Errorf("read the stored review: %w", err)
	}
	return &s, nil
}

// WithApproval is s with the approval state cr records now: the stored
// section keeps the plan and the diff, the approval moves on.
func WithApproval(s *Section, cr *sluicev1.ChangeRequest) *Section {
	t := *s
	t.Approval = approvalOf(cr)
	t.Verification = verificationOf(cr)
	return &t
}
