package policy

import (
	"context"
	"testing"
)

// TestEvalSecrets_aDocumentWithoutSecretsGivesAnEmptyListNotNil: nil tells
// review.Build "not gathered, walk the plan yourself"; a plan without
// secrets must say "gathered, none".
func TestEvalSecrets_aDocumentWithoutSecretsGivesAnEmptyListNotNil(t *testing.T) {
	e, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, secrets, err := e.EvalSecrets(context.Background(), KindTerraform, []Document{{Path: "plan.json", Value: map[string]any{"resource_changes": []any{}}}})
	if err != nil {
		t.Fatal(err)
	}
	if secrets == nil {
		t.Fatal("secrets is nil for a document without secrets")
	}
}
