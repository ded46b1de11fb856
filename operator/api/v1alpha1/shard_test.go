package v1alpha1

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func TestShardSelector_selectsTheShardOrTheUnlabelled(t *testing.T) {
	for _, tc := range []struct {
		key    string
		labels labels.Set
		match  bool
	}{
		{"a", labels.Set{LabelShard: "a"}, true},
		{"a", labels.Set{LabelShard: "b"}, false},
		{"a", labels.Set{}, false},
		{"", labels.Set{}, true},
		{"", labels.Set{LabelShard: "a"}, false},
	} {
		if got := ShardSelector(tc.key).Matches(tc.labels); got != tc.match {
			t.Errorf("ShardSelector(%q).Matches(%v) = %v, want %v", tc.key, tc.labels, got, tc.match)
		}
	}
	if s := ShardSelector("").String(); s != "!"+LabelShard {
		t.Errorf("unsharded selector = %q", s)
	}
}

func TestSetShard_setsRemovesAndReportsChange(t *testing.T) {
	o := &metav1.ObjectMeta{}
	if SetShard(o, "") {
		t.Error("removing an absent key changed something")
	}
	if !SetShard(o, "a") || ShardOf(o) != "a" {
		t.Error("setting a key")
	}
	if SetShard(o, "a") {
		t.Error("setting the same key changed something")
	}
	if !SetShard(o, "") || ShardOf(o) != "" {
		t.Error("removing the key")
	}
}

func TestValidateShard_refusesWhatCannotNameALease(t *testing.T) {
	for key, ok := range map[string]bool{"": true, "a": true, "eu-1": true, "EU": false, "a.b": false, "-a": false, "a b": false} {
		if err := ValidateShard(key); (err == nil) != ok {
			t.Errorf("ValidateShard(%q) = %v, want ok=%v", key, err, ok)
		}
	}
	if ShardLeaseName("sluice-operator.gitops.sluice.dev", "eu-1") != "eu-1.sluice-operator.gitops.sluice.dev" {
		t.Error("lease name")
	}
}
