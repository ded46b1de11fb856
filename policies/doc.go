// Package policies holds Sluice's default Rego policies, embedded so the
// validator ships them.
//
// Layout (every file is Rego v1):
//
//	rego/lib/                 helpers (package sluice.lib.*), no rules of their own
//	rego/terraform/           package sluice.terraform.<check>; input is a Terraform
//	                          plan in JSON (terraform show -json), as conftest sees it
//	rego/kubernetes/          package sluice.kubernetes.<check>; input is ONE rendered
//	                          Kubernetes object, as conftest sees each YAML document
//	rego/kubernetes_combined/ package sluice.kubernetes_combined.<check>; input is every
//	                          rendered object at once, in conftest's --combine shape:
//	                          [{"path": <file>, "contents": <object>}, ...]
//	data/defaults.yaml        configuration at data.sluice.config (allowlists, ...)
//
// Rules follow conftest: deny/violation (and deny_x, violation_x) fail,
// warn (and warn_x) warn. Each returns a string or an object with "msg"; the
// defaults return objects with "msg" and "resource" (the Terraform address or
// Kind/namespace/name), so findings can be grouped by resource.
//
// Sluice adds one convention: a rule named unverifiable (or unverifiable_x),
// shaped like deny, reports a check that depends on a value unknown until
// apply (Terraform's after_unknown). The validator maps it to the severity
// "unverifiable", which blocks auto-approval; conftest ignores the rule, so
// the policies stay usable with conftest.
//
// Tests live next to each policy (<name>_test.rego, package <pkg>_test); every
// policy package has at least one test_pass_* and one test_fail_* rule, which
// TestEveryPolicyHasPassAndFailTests enforces.
package policies

import (
	"embed"
	"io/fs"
)

//go:embed rego data
var files embed.FS

// FS returns the embedded policy tree: rego/** (policies and their
// _test.rego files) and data/defaults.yaml. Loaders that only want the
// policies skip files ending in _test.rego.
func FS() fs.FS { return files }

// DefaultDataPath is the path, inside FS, of the default configuration data.
const DefaultDataPath = "data/defaults.yaml"

// Namespace prefixes of the default policies, by input kind.
const (
	// TerraformNamespace holds the packages evaluated against a plan JSON.
	TerraformNamespace = "sluice.terraform"
	// KubernetesNamespace holds the packages evaluated against each rendered object.
	KubernetesNamespace = "sluice.kubernetes"
	// KubernetesCombinedNamespace holds the packages evaluated once against all
	// rendered objects, in conftest's --combine input shape.
	KubernetesCombinedNamespace = "sluice.kubernetes_combined"
)
