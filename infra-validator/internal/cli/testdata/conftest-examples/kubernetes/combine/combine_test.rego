# Copied unchanged from github.com/open-policy-agent/conftest v0.71.1, examples/kubernetes/combine/combine_test.rego
# Copyright The Conftest Authors. Apache License 2.0: see LICENSE in this folder.
package main
import rego.v1

test_parse_combined_config_file if {
	count(violation) == 1 with input as parse_combined_config_files(["combine.yaml"])
}

test_parse_combined_config_files if {
	count(violation) == 1 with input as parse_combined_config_files(["deployment.yaml", "service.yaml"])
}
