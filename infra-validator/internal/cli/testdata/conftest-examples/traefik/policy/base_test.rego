# Copied unchanged from github.com/open-policy-agent/conftest v0.71.1, examples/traefik/policy/base_test.rego
# Copyright The Conftest Authors. Apache License 2.0: see LICENSE in this folder.
package main
import rego.v1

test_ip_with_disallowed_ciphers if {
	deny["IPs should not use disallowed ciphers"] with input as {
		"entryPoints": {"http": {"tls": {"cipherSuites": ["TLS_RSA_WITH_AES_256_GCM_SHA384"]}}}
	}
}
