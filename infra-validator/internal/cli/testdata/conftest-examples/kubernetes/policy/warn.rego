# Copied unchanged from github.com/open-policy-agent/conftest v0.71.1, examples/kubernetes/policy/warn.rego
# Copyright The Conftest Authors. Apache License 2.0: see LICENSE in this folder.
package main
import rego.v1

import data.kubernetes

name := input.metadata.name

warn contains msg if {
	kubernetes.is_service
	msg = sprintf("Found service %s but services are not allowed", [name])
}
