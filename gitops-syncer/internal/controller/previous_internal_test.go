package controller

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"k8s.io/apimachinery/pkg/types"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestPreviousRevision_isTheAppliedRevisionOnly(t *testing.T) {
	tests := []struct {
		name            string
		applied, synced string
		want            string
	}{
		{"a first change has none", "", "", ""},
		{"the applied revision, not the last synced one", "c1", "c2", "c1"},
		{"nothing applied: none, whatever was synced", "", "c2", ""},
		{"a re-plan of the applied commit: itself", "c3", "c3", "c3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rel := &sluicev1.Release{Status: sluicev1.ReleaseStatus{AppliedRevision: tt.applied, LastSyncedCommit: tt.synced}}
			assert.Equal(t, tt.want, previousRevision(rel))
		})
	}
}

func TestRememberManifest_keepsOneRevisionPerReleaseWithinTheBudget(t *testing.T) {
	r := &RepositoryReconciler{}
	key := types.NamespacedName{Namespace: "ns", Name: "web-staging"}
	r.rememberManifest(key, "c1", "a: 1\n")
	r.rememberManifest(key, "c2", "a: 2\n")
	_, ok := r.rememberedManifest(key, "c1")
	assert.False(t, ok, "only the newest revision is kept")
	m, ok := r.rememberedManifest(key, "c2")
	assert.True(t, ok)
	assert.Equal(t, "a: 2\n", m)
	assert.Equal(t, len("a: 2\n"), r.manifestBytes)
}
