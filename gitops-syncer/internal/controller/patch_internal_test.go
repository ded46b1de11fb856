package controller

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/sluice-gitops/sluice/kit/testenv"
	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// The re-plan annotation's value is whatever a user wrote; the patch that
// marks it handled is valid JSON and carries the value back unchanged,
// whatever characters it holds.
func FuzzAnnotationPatch_anyValueIsValidJSON(f *testing.F) {
	for _, v := range []string{"2026-12-01T10:00:00Z", "\x01", "a\vb", "\x7f", "\u2028", `"}}`, "é\xff", ""} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, value string) {
		data, err := annotationPatch(annotationReplanHandled, value).Data(nil)
		require.NoError(t, err)
		require.True(t, json.Valid(data), "patch %s", data)
		var got struct {
			Metadata struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"metadata"`
		}
		require.NoError(t, json.Unmarshal(data, &got))
		require.Equal(t, strings.ToValidUTF8(value, "\uFFFD"), got.Metadata.Annotations[annotationReplanHandled])

		data, err = statusPatch(map[string]*string{"lastSyncedTree": nil, "latestChange": &value}).Data(nil)
		require.NoError(t, err)
		require.True(t, json.Valid(data), "patch %s", data)
		require.Contains(t, string(data), `"lastSyncedTree":null`)
	})
}

// A Release deleted while a pass works on it has no condition left to set:
// that is not an error of the pass.
func TestSetSynced_aReleaseDeletedMidPassIsNoError(t *testing.T) {
	scheme := testenv.Scheme()
	c := fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&sluicev1.Release{}).Build()
	r := &RepositoryReconciler{Client: c, APIReader: c}
	gone := &sluicev1.Release{ObjectMeta: metav1.ObjectMeta{Name: "web-prod", Namespace: "ctl", UID: "u1"}}

	require.NoError(t, r.setSynced(context.Background(), gone, metav1.ConditionTrue, sluicev1.ReasonSucceeded, "web-prod-0123456789 holds the inputs"))
}
