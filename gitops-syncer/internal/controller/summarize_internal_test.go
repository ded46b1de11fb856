package controller

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	sluicev1 "github.com/sluice-gitops/sluice/operator/api/v1alpha1"
)

// summarize is a pure step: what a pass concluded goes into the status
// once, and observedGeneration only after a pass without error.
func TestSummarize(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
		// ready is what the pass concluded (nil: nothing).
		ready *readiness
		// The status after summarize ("" for a condition that is absent).
		observed                                int64
		wantReady, wantStalled, wantReconciling metav1.ConditionStatus
	}{
		{name: "a failed pass keeps the observed generation and says why in Ready", ok: false, ready: ptr(retrying(sluicev1.ReasonGitOperationFailed, "some releases failed")),
			observed: 1, wantReady: metav1.ConditionFalse, wantReconciling: metav1.ConditionTrue},
		{name: "a pass without error records the generation it processed", ok: true, ready: ptr(ready(sluicev1.ReasonSucceeded, "synced")),
			observed: 2, wantReady: metav1.ConditionTrue},
		{name: "a stalled pass processed its generation and waits for a human", ok: true, ready: ptr(stalledBy(sluicev1.ReasonSecretNotFound, "secret \"git\" not found")),
			observed: 2, wantReady: metav1.ConditionFalse, wantStalled: metav1.ConditionTrue},
		{name: "a suspended Repository is neither retried nor stalled", ok: true, ready: ptr(suspended()),
			observed: 2, wantReady: metav1.ConditionFalse},
		{name: "a pass that concluded nothing leaves the conditions as they were", ok: true,
			observed: 2, wantReady: metav1.ConditionUnknown, wantStalled: metav1.ConditionTrue, wantReconciling: metav1.ConditionTrue},
	} {
		t.Run(tt.name, func(t *testing.T) {
			repo := &sluicev1.Repository{ObjectMeta: metav1.ObjectMeta{Generation: 2}}
			repo.Status.ObservedGeneration = 1
			for _, c := range []string{sluicev1.ConditionReady, sluicev1.ConditionStalled, sluicev1.ConditionReconciling} {
				status := metav1.ConditionTrue
				if c == sluicev1.ConditionReady {
					status = metav1.ConditionUnknown
				}
				meta.SetStatusCondition(&repo.Status.Conditions, metav1.Condition{Type: c, Status: status, Reason: "Before", Message: "before the pass"})
			}
			(&repoScope{repo: repo, ready: tt.ready}).summarize(tt.ok)

			assert.Equal(t, tt.observed, repo.Status.ObservedGeneration)
			for c, want := range map[string]metav1.ConditionStatus{
				sluicev1.ConditionReady: tt.wantReady, sluicev1.ConditionStalled: tt.wantStalled, sluicev1.ConditionReconciling: tt.wantReconciling,
			} {
				got := meta.FindStatusCondition(repo.Status.Conditions, c)
				if want == "" {
					assert.Nil(t, got, c)
					continue
				}
				require.NotNil(t, got, c)
				assert.Equal(t, want, got.Status, c)
				if tt.ready != nil && c == sluicev1.ConditionReady {
					assert.Equal(t, tt.ready.reason, got.Reason)
					assert.Equal(t, tt.ready.message, got.Message)
					assert.Equal(t, repo.Generation, got.ObservedGeneration)
				}
			}
		})
	}
}

func ptr(r readiness) *readiness { return &r }

// The Repository's Ready, Stalled and Reconciling conditions and its
// observedGeneration have one writer, summarize: the steps only say what
// they concluded. Read from the package's source, every condition write
// and every observedGeneration assignment is in summarize, or in
// setReleaseStatus (a Release's own Synced and Orphaned conditions, with
// setReleaseCondition).
func TestRepositoryStatus_hasOneWriter(t *testing.T) {
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	writers := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		require.NoError(t, err)
		f, err := parser.ParseFile(fset, name, src, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
						if x, ok := sel.X.(*ast.Ident); ok && x.Name == "meta" && (sel.Sel.Name == "SetStatusCondition" || sel.Sel.Name == "RemoveStatusCondition") {
							writers[fn.Name.Name] = true
						}
					}
				case *ast.AssignStmt:
					for _, lhs := range n.Lhs {
						if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "ObservedGeneration" {
							writers[fn.Name.Name] = true
						}
					}
				}
				return true
			})
		}
	}
	got := make([]string, 0, len(writers))
	for w := range writers {
		got = append(got, w)
	}
	sort.Strings(got)
	assert.Equal(t, []string{"setReleaseStatus", "summarize"}, got, "functions that write conditions or observedGeneration")
}
