# Copied unchanged from github.com/open-policy-agent/conftest v0.71.1, examples/kubernetes/policy/kubernetes.rego
# Copyright The Conftest Authors. Apache License 2.0: see LICENSE in this folder.
package kubernetes
import rego.v1

is_service if {
	input.kind = "Service"
}

is_deployment if {
	input.kind = "Deployment"
}
