package policy

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestEvalPart_aFailingRuleIsToldApartFromTheOthers: one rule returning an
// object without "msg" fails the whole per-document query; evaluated one
// by one, the other rules still give their findings and only that rule
// fails.
func TestEvalPart_aFailingRuleIsToldApartFromTheOthers(t *testing.T) {
	dir := t.TempDir()
	rego := `package main

deny_broken contains {"no": "msg"} if input.kind == "ConfigMap"

deny_named contains msg if {
	input.kind == "ConfigMap"
	msg := sprintf("ConfigMap %s is named", [input.metadata.name])
}
`
	if err := os.WriteFile(filepath.Join(dir, "p.rego"), []byte(rego), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	e, err := New(ctx, Options{PolicyDirs: []string{dir}})
	if err != nil {
		t.Fatal(err)
	}
	perDoc, combined := e.Policies(KindKubernetes)
	for _, want := range []string{"main/deny_broken", "main/deny_named", "sluice.kubernetes.secrets/deny"} {
		if !slices.Contains(perDoc, want) {
			t.Fatalf("per-document policies %v lack %s", perDoc, want)
		}
	}
	if !slices.Contains(combined, "sluice.kubernetes_combined.pdb/warn") {
		t.Fatalf("combined policies %v lack the PDB rule", combined)
	}
	doc := []Document{{Path: "cm", Value: map[string]any{"kind": "ConfigMap", "metadata": map[string]any{"name": "a", "namespace": "x"}}}}
	if _, err := e.EvalPart(ctx, KindKubernetes, Part{}, doc); err == nil {
		t.Fatal("the per-document part evaluated although a rule returns an object without msg")
	}
	if _, err := e.EvalPart(ctx, KindKubernetes, Part{Policy: "main/deny_broken"}, doc); err == nil {
		t.Fatal("the broken rule alone evaluated without an error")
	}
	fs, err := e.EvalPart(ctx, KindKubernetes, Part{Policy: "main/deny_named"}, doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Message != "ConfigMap a is named" || fs[0].Policy != "main/deny_named" {
		t.Fatalf("findings of the working rule: %+v", fs)
	}
	if _, err := e.EvalPart(ctx, KindKubernetes, Part{Policy: "main/nope"}, doc); err == nil {
		t.Fatal("an unknown policy evaluated")
	}
	// The combined part runs apart from the per-document rules.
	dep := Document{Path: "d", Value: map[string]any{"kind": "Deployment", "metadata": map[string]any{"name": "web", "namespace": "prod"},
		"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}}}}}}
	fs, err = e.EvalPart(ctx, KindKubernetes, Part{Combined: true}, []Document{dep})
	if err != nil {
		t.Fatal(err)
	}
	if len(fs) != 1 || fs[0].Policy != "sluice.kubernetes_combined.pdb/warn" {
		t.Fatalf("combined findings: %+v", fs)
	}
}
