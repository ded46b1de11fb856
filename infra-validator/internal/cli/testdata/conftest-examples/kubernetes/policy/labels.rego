# Copied unchanged from github.com/open-policy-agent/conftest v0.71.1, examples/kubernetes/policy/labels.rego
# Copyright The Conftest Authors. Apache License 2.0: see LICENSE in this folder.
package main
import rego.v1

import data.kubernetes

name := input.metadata.name

required_deployment_labels if {
	input.metadata.labels["app.kubernetes.io/name"]
	input.metadata.labels["app.kubernetes.io/instance"]
	input.metadata.labels["app.kubernetes.io/version"]
	input.metadata.labels["app.kubernetes.io/component"]
	input.metadata.labels["app.kubernetes.io/part-of"]
	input.metadata.labels["app.kubernetes.io/managed-by"]
}

deny contains msg if {
	kubernetes.is_deployment
	not required_deployment_labels
	msg = sprintf("%s must include Kubernetes recommended labels: https://kubernetes.io/docs/concepts/overview/working-with-objects/common-labels/#labels", [name])
}
