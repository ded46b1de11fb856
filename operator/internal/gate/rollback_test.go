package gate

import (
	"testing"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

func TestStrictest_rollbackApprovalBeatsAuto(t *testing.T) {
	auto := sluicev1.ApprovalRule{Rollback: sluicev1.RollbackAuto}
	tests := []struct {
		name    string
		sources []sluicev1.ApprovalRule
		want    bool
	}{
		{"every source says auto", []sluicev1.ApprovalRule{auto, auto}, true},
		{"one source says approval", []sluicev1.ApprovalRule{auto, {Rollback: sluicev1.RollbackApproval}}, false},
		{"one source leaves it out (approval is the default)", []sluicev1.ApprovalRule{auto, {}}, false},
		{"no source at all", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var src []Source
			for _, r := range tt.sources {
				src = append(src, Source{Origin: "test", Rule: r})
			}
			got := Strictest(src...)
			if got.RollbackAuto != tt.want {
				t.Fatalf("RollbackAuto = %v, want %v", got.RollbackAuto, tt.want)
			}
			if api := got.API(); Strictest(Source{Rule: api}).RollbackAuto != tt.want {
				t.Fatalf("API() %+v does not round-trip rollback", api)
			}
		})
	}
}
