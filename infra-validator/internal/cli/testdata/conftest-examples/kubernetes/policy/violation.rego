# Copied unchanged from github.com/open-policy-agent/conftest v0.71.1, examples/kubernetes/policy/violation.rego
# Copyright The Conftest Authors. Apache License 2.0: see LICENSE in this folder.
package main
import rego.v1

import data.kubernetes

name := input.metadata.name

violation := [{"msg": msg, "details": {}}] if {
	kubernetes.is_deployment
	msg := sprintf("Found deployment %s but deployments are not allowed", [name])
}
