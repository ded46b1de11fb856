package review

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
)

// A Section is stored beside its ChangeRequest, so `kubectl sluice diff`
// shows the same plan and manifest diff as the pull request: a Secret
// (the section is redacted already, but it still describes infrastructure)
// named SecretName(change), owned by the ChangeRequest, holding
// Encode(section) under SecretKey.
const (
	SecretKey = "section.json.gz"
	// LabelReview marks those Secrets.
	LabelReview = "gitops.sluice.dev/review"
	// maxDecoded caps what Decode inflates.
	maxDecoded = 64 << 20
)

// SecretName is the name of the Secret holding a change's section.
func SecretName(change string) string { return change + "-review" }

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
