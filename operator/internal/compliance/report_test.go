package compliance

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sluice-gitops/sluice/infra-validator/pkg/report"
)

// TestBuild_limitsKeepTheSummaryExact is Build alone (a pure step): with
// more results than MaxResults, or than MaxBytes hold, the Report keeps
// the most severe first, says how many it left out, and its summary still
// counts all of them; built again from the Report it wrote, it is equal
// (timestamps carried over), so an unchanged namespace writes nothing.
func TestBuild_limitsKeepTheSummaryExact(t *testing.T) {
	var objs []*unstructured.Unstructured
	outcomes := map[types.UID]Outcome{}
	for i := range 300 {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("v1")
		o.SetKind("ConfigMap")
		o.SetNamespace("shop")
		o.SetName(fmt.Sprintf("cm-%03d", i))
		o.SetUID(types.UID(fmt.Sprintf("uid-%03d", i)))
		objs = append(objs, o)
		switch {
		case i < 100:
			outcomes[o.GetUID()] = Outcome{Findings: []report.Finding{{Severity: report.SeverityWarn, Policy: "p.a/warn", Message: strings.Repeat("w", 300)}}}
		case i < 150:
			outcomes[o.GetUID()] = Outcome{Findings: []report.Finding{{Severity: report.SeverityDeny, Policy: "p.b/deny", Message: "bad"}}}
		case i < 160:
			outcomes[o.GetUID()] = Outcome{Errors: map[string]string{"p.c/deny": "boom"}}
		}
	}
	now := time.Unix(1_800_000_000, 0)
	cases := []struct {
		sentence    string
		maxResults  int
		maxBytes    int
		wantResults int
	}{
		{"under every limit, every result is kept", 1000, 1 << 20, 160},
		{"past MaxResults, MaxResults are kept", 55, 1 << 20, 55},
		{"past MaxBytes, only what fits is kept", 1000, 20_000, -1},
	}
	for _, c := range cases {
		t.Run(c.sentence, func(t *testing.T) {
			in := Input{Namespace: "shop", BundleDigest: "sha256:abc", Objects: objs, Outcomes: outcomes, Now: now, MaxResults: c.maxResults, MaxBytes: c.maxBytes}
			rep := Build(in)
			require.Equal(t, 140, rep.Summary.Pass)
			require.Equal(t, 50, rep.Summary.Fail)
			require.Equal(t, 100, rep.Summary.Warn)
			require.Equal(t, 10, rep.Summary.Error)
			if c.wantResults >= 0 {
				require.Len(t, rep.Results, c.wantResults)
			}
			b, err := json.Marshal(rep.Results)
			require.NoError(t, err)
			require.LessOrEqual(t, len(b), c.maxBytes)
			require.Equal(t, fmt.Sprint(160-len(rep.Results)), rep.Annotations[AnnotationOmitted])
			// Errors first, then failures, then warnings.
			for i := 1; i < len(rep.Results); i++ {
				require.LessOrEqual(t, rank(rep.Results[i-1].Result), rank(rep.Results[i].Result))
			}
			in.Previous, in.Now = rep, now.Add(time.Hour)
			require.True(t, sameReport(rep, Build(in)), "the same input built a different Report an hour later")
		})
	}
}

// TestBuild_combinedFindingsNameTheirObject: a finding of a combined
// policy (over the whole namespace) names the object its resource names,
// and an error of one names the namespace.
func TestBuild_combinedFindingsNameTheirObject(t *testing.T) {
	o := &unstructured.Unstructured{}
	o.SetAPIVersion("apps/v1")
	o.SetKind("Deployment")
	o.SetNamespace("shop-prod")
	o.SetName("web")
	o.SetUID("u1")
	rep := Build(Input{
		Namespace: "shop-prod", Objects: []*unstructured.Unstructured{o}, Outcomes: map[types.UID]Outcome{},
		Combined: Outcome{
			Findings: []report.Finding{{Severity: report.SeverityWarn, Policy: "sluice.kubernetes_combined.pdb/warn", Resource: "Deployment/shop-prod/web", Message: "no PDB"}},
			Errors:   map[string]string{"main/deny_all": "boom"},
		},
		Now: time.Unix(1, 0),
	})
	require.Len(t, rep.Results, 2)
	require.Equal(t, "Namespace", rep.Results[0].Subjects[0].Kind)
	require.Equal(t, "Deployment", rep.Results[1].Subjects[0].Kind)
	require.Equal(t, "web", rep.Results[1].Subjects[0].Name)
	require.Equal(t, "sluice.kubernetes_combined.pdb", rep.Results[1].Policy)
	require.Equal(t, "warn", rep.Results[1].Rule)
	// The object counts as passing no more: it has a (combined) warning.
	require.Equal(t, 1, rep.Summary.Warn)
	require.Zero(t, rep.Summary.Pass)
}
