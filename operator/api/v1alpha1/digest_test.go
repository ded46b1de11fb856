package v1alpha1

import (
	"strings"
	"testing"
)

// The vectors were computed independently with sha256sum over the exact
// preimage DESIGN.md §4 defines, so a change in the format breaks this test.
func TestComputeApprovalDigest_matchesTheDocumentedPreimage(t *testing.T) {
	a := Digest("sha256:" + strings.Repeat("a", 64))
	b := Digest("sha256:" + strings.Repeat("b", 64))
	zero := Digest("sha256:" + strings.Repeat("0", 64))
	tests := []struct {
		name                    string
		ns, release             string
		content, manifest, plan Digest
		want                    Digest
	}{
		{"helm only", "sluice-system", "checkout-staging", a, b, "", "sha256:ebe7062feefb452c51fb5b7ee7b2d250a90e6a6b89e5de59c9975cdeb81feaf7"},
		{"content only", "team-a", "web-prod", zero, "", "", "sha256:7e82cbf1433017454fc4267c1bccbd5ff378513e2aa177f1bb527eac15550e08"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ComputeApprovalDigest(tt.ns, tt.release, tt.content, tt.manifest, tt.plan)
			if got != tt.want {
				t.Fatalf("ComputeApprovalDigest = %s, want %s", got, tt.want)
			}
			if !ValidDigest(string(got)) {
				t.Fatalf("%s is not a valid digest", got)
			}
		})
	}
}

func TestComputeApprovalDigest_bindsReleaseAndEveryDigest(t *testing.T) {
	a := Digest("sha256:" + strings.Repeat("a", 64))
	b := Digest("sha256:" + strings.Repeat("b", 64))
	base := ComputeApprovalDigest("ns", "svc-staging", a, b, a)
	for name, other := range map[string]Digest{
		"another release":   ComputeApprovalDigest("ns", "svc-prod", a, b, a),
		"another namespace": ComputeApprovalDigest("ns2", "svc-staging", a, b, a),
		"another content":   ComputeApprovalDigest("ns", "svc-staging", b, b, a),
		"another manifest":  ComputeApprovalDigest("ns", "svc-staging", a, a, a),
		"no plan":           ComputeApprovalDigest("ns", "svc-staging", a, b, ""),
	} {
		if other == base {
			t.Errorf("%s gives the same approvalDigest", name)
		}
	}
	cr := &ChangeRequest{Spec: ChangeRequestSpec{Release: "svc-staging", ContentDigest: a, ManifestDigest: b, PlanDigest: a}}
	cr.Namespace = "ns"
	if cr.ExpectedApprovalDigest() != base {
		t.Errorf("ExpectedApprovalDigest disagrees with ComputeApprovalDigest")
	}
}

func TestValidDigest(t *testing.T) {
	for d, want := range map[string]bool{
		"sha256:" + strings.Repeat("a", 64): true,
		"sha256:" + strings.Repeat("A", 64): false,
		"sha256:" + strings.Repeat("a", 63): false,
		"sha512:" + strings.Repeat("a", 64): false,
		strings.Repeat("a", 64):             false,
		"":                                  false,
	} {
		if got := ValidDigest(d); got != want {
			t.Errorf("ValidDigest(%q) = %v, want %v", d, got, want)
		}
	}
}

func TestNames(t *testing.T) {
	sha := "0123456789abcdef0123456789abcdef01234567"
	if got := ReleaseName("checkout", "prod"); got != "checkout-prod" {
		t.Errorf("ReleaseName = %s", got)
	}
	if got := ChangeRequestName("checkout-prod", sha, 1); got != "checkout-prod-0123456789" {
		t.Errorf("ChangeRequestName attempt 1 = %s", got)
	}
	if got := ChangeRequestName("checkout-prod", sha, 3); got != "checkout-prod-0123456789-r3" {
		t.Errorf("ChangeRequestName attempt 3 = %s", got)
	}
	if got := PreviewChangeRequestName("checkout-prod", 42, sha); got != "checkout-prod-pr42-0123456789" {
		t.Errorf("PreviewChangeRequestName = %s", got)
	}
	if got := PlanSecretName("x", 0); got != "x-plan" {
		t.Errorf("PlanSecretName 0 = %s", got)
	}
	if got := PlanSecretName("x", 2); got != "x-plan-2" {
		t.Errorf("PlanSecretName 2 = %s", got)
	}
}

func TestPhaseIsTerminal(t *testing.T) {
	terminal := map[ChangeRequestPhase]bool{
		PhasePending: false, PhaseAwaitingApproval: false, PhaseApproved: false, PhaseApplying: false,
		PhaseRejected: true, PhaseApplied: true, PhaseFailed: true, PhaseSuperseded: true, PhasePreview: true,
	}
	for p, want := range terminal {
		if p.IsTerminal() != want {
			t.Errorf("%s.IsTerminal() = %v, want %v", p, !want, want)
		}
	}
}

// Delete vectors, computed with sha256sum over the Apply preimage plus the
// line "operation:delete\n"; the Apply vectors above are unchanged.
func TestComputeOperationApprovalDigest_deleteAddsOneLineAndApplyIsUnchanged(t *testing.T) {
	a := Digest("sha256:" + strings.Repeat("a", 64))
	b := Digest("sha256:" + strings.Repeat("b", 64))
	zero := Digest("sha256:" + strings.Repeat("0", 64))
	tests := []struct {
		name                    string
		ns, release             string
		content, manifest, plan Digest
		want                    Digest
	}{
		{"helm only", "sluice-system", "checkout-staging", a, b, "", "sha256:33e102bd648f02303c146e566aad5e58a969e663f7b5cb85c74620794ed37e93"},
		{"content and plan", "team-a", "web-prod", zero, "", a, "sha256:99c69c139774ff1fa1410725d53acae2b69bf955e38b6e664b4347ff3adb6df5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ComputeOperationApprovalDigest(tt.ns, tt.release, OperationDelete, tt.content, tt.manifest, tt.plan); got != tt.want {
				t.Fatalf("Delete digest = %s, want %s", got, tt.want)
			}
			apply := ComputeApprovalDigest(tt.ns, tt.release, tt.content, tt.manifest, tt.plan)
			for _, op := range []Operation{"", OperationApply} {
				if got := ComputeOperationApprovalDigest(tt.ns, tt.release, op, tt.content, tt.manifest, tt.plan); got != apply {
					t.Fatalf("operation %q gives %s, the Apply digest is %s", op, got, apply)
				}
			}
			cr := &ChangeRequest{Spec: ChangeRequestSpec{Release: tt.release, Operation: OperationDelete, ContentDigest: tt.content, ManifestDigest: tt.manifest, PlanDigest: tt.plan}}
			cr.Namespace = tt.ns
			if cr.ExpectedApprovalDigest() != tt.want {
				t.Fatalf("ExpectedApprovalDigest ignores the operation")
			}
		})
	}
}

func TestDeleteChangeRequestName(t *testing.T) {
	sha := "0123456789abcdef0123456789abcdef01234567"
	if got := DeleteChangeRequestName("cart-staging", sha, 1); got != "cart-staging-del-0123456789" {
		t.Errorf("attempt 1 = %s", got)
	}
	if got := DeleteChangeRequestName("cart-staging", sha, 2); got != "cart-staging-del-0123456789-r2" {
		t.Errorf("attempt 2 = %s", got)
	}
}

// A rollback's claim is part of its digest: the same content without the
// claim, or with another failed or verified change named, digests
// otherwise (the vector was computed with sha256sum over the preimage).
func TestComputeRollbackApprovalDigest_bindsTheRollbackClaim(t *testing.T) {
	a := Digest("sha256:" + strings.Repeat("a", 64))
	rb := &RollbackSpec{Of: "web-prod-bbbbbbbbbb", To: "web-prod-aaaaaaaaaa"}
	got := ComputeRollbackApprovalDigest("team-a", "web-prod", OperationApply, a, "", "", "", rb)
	if want := Digest("sha256:f676c3986fe1c5b9e8f55cf1a4bc99d81067ea72b756dcc03ca3dc06030f2ca9"); got != want {
		t.Fatalf("rollback digest = %s, want %s", got, want)
	}
	if plain := ComputeChangeApprovalDigest("team-a", "web-prod", OperationApply, a, "", "", ""); plain == got {
		t.Fatal("a rollback digests like the same content without the claim")
	}
	if ComputeRollbackApprovalDigest("team-a", "web-prod", OperationApply, a, "", "", "", nil) != ComputeChangeApprovalDigest("team-a", "web-prod", OperationApply, a, "", "", "") {
		t.Fatal("a change that is no rollback digests otherwise than it always did")
	}
	for _, other := range []*RollbackSpec{{Of: "web-prod-cccccccccc", To: rb.To}, {Of: rb.Of, To: "web-prod-dddddddddd"}} {
		if ComputeRollbackApprovalDigest("team-a", "web-prod", OperationApply, a, "", "", "", other) == got {
			t.Fatalf("rollback %+v digests like %+v", other, rb)
		}
	}
	cr := &ChangeRequest{}
	cr.Namespace = "team-a"
	cr.Spec = ChangeRequestSpec{Release: "web-prod", ContentDigest: a, Rollback: rb}
	if cr.ExpectedApprovalDigest() != got {
		t.Fatal("ExpectedApprovalDigest leaves spec.rollback out")
	}
}

func TestRollbackChangeRequestName(t *testing.T) {
	for _, c := range []struct {
		of      string
		attempt int32
		want    string
	}{
		{"web-prod-bbbbbbbbbb", 1, "web-prod-rb-bbbbbbbbbb"},
		{"web-prod-bbbbbbbbbb-r2", 1, "web-prod-rb-bbbbbbbbbb-r2"},
		{"web-prod-bbbbbbbbbb", 3, "web-prod-rb-bbbbbbbbbb-r3"},
		{"other", 1, "web-prod-rb-" + ShortSHA(strings.TrimPrefix(string(SHA256Digest([]byte("other"))), "sha256:"))},
	} {
		if got := RollbackChangeRequestName("web-prod", c.of, c.attempt); got != c.want {
			t.Errorf("RollbackChangeRequestName(web-prod, %s, %d) = %s, want %s", c.of, c.attempt, got, c.want)
		}
	}
}
