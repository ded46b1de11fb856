package drift

import (
	"strings"
	"testing"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// A long drift summary is cut on a character boundary: the API server
// refuses a status write whose strings are not valid UTF-8, so a cut
// inside a character would lose the whole Drifted condition.
func TestCondition_aLongMessageIsCutOnACharacterBoundary(t *testing.T) {
	msg := strings.Repeat("é", maxMessage) // two bytes each
	c := condition(&sluicev1.Release{}, metav1.ConditionTrue, sluicev1.ReasonDriftDetected, msg)
	if !utf8.ValidString(c.Message) {
		t.Fatalf("message is not valid UTF-8: %q", c.Message[len(c.Message)-8:])
	}
	if len(c.Message) > 1024 || !strings.HasSuffix(c.Message, "…") {
		t.Fatalf("message is %d bytes ending %q, want at most 1024 ending with …", len(c.Message), c.Message[len(c.Message)-8:])
	}
}
