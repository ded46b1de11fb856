package v1alpha1

import "testing"

// The defaults the syncer's poll, its webhook receiver and the operator all
// read through one getter each.
func TestGetters_defaultsAreTheAPIs(t *testing.T) {
	for _, tc := range []struct {
		ref  *GitReference
		want string
	}{
		{nil, "refs/heads/main"},
		{&GitReference{}, "refs/heads/main"},
		{&GitReference{Branch: "release"}, "refs/heads/release"},
		{&GitReference{Tag: "v1.2.0"}, "refs/tags/v1.2.0"},
	} {
		r := &Repository{Spec: RepositorySpec{Ref: tc.ref}}
		if got := r.TrackedRef(); got != tc.want {
			t.Errorf("TrackedRef of %+v = %q, want %q", tc.ref, got, tc.want)
		}
	}
	if got := (&Repository{}).ServicesPath(); got != "services" {
		t.Errorf("default services path %q", got)
	}
	if got := (&Repository{Spec: RepositorySpec{ServicesPath: "apps"}}).ServicesPath(); got != "apps" {
		t.Errorf("services path %q", got)
	}
	if got := (&Release{}).Delivery(); got != DeliveryHelm {
		t.Errorf("default delivery %q", got)
	}
	if got := (&ChangeRequest{Spec: ChangeRequestSpec{Delivery: DeliveryArgoCD}}).Delivery(); got != DeliveryArgoCD {
		t.Errorf("delivery %q", got)
	}
	if got := ShortSHA("0123456789abcdef"); got != "0123456789" {
		t.Errorf("ShortSHA %q", got)
	}
	if got := ShortSHA("abc"); got != "abc" {
		t.Errorf("ShortSHA of a short string %q", got)
	}
}
