# Copied unchanged from github.com/open-policy-agent/conftest v0.71.1, examples/data/policy/base_test.rego
# Copyright The Conftest Authors. Apache License 2.0: see LICENSE in this folder.
package main
import rego.v1

test_service_denied if {
	service := {
		"kind": "Service",
		"metadata": {"name": "sample"},
		"spec": {
			"type": "LoadBalancer",
			"ports": [{"port": 22}],
		},
	}

	deny["Cannot expose port 22 on LoadBalancer. Denied ports: [22, 21]"] with input as service
}
