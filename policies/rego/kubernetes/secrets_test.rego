package sluice.kubernetes.secrets_test

import data.sluice.kubernetes.fixtures_test as fx
import data.sluice.kubernetes.secrets

cm(d) := {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg", "namespace": "shop"}, "data": d}

aws_key := "AKIAIOSFODNN7EXAMPLE"

pem := "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----\n"

test_pass_plain_config if {
	count(secrets.deny) == 0 with input as cm({"LOG_LEVEL": "debug", "TOKEN_URL": "https://auth.example.com/token", "DB_PASSWORD": "${DB_PASSWORD}", "password": ""})
}

test_pass_env_from_secret if {
	c := object.union(fx.good_container, {"env": [{"name": "API_TOKEN", "valueFrom": {"secretKeyRef": {"name": "s", "key": "t"}}}]})
	count(secrets.deny) == 0 with input as fx.deployment("shop", 2, [c])
}

test_fail_private_key_and_cloud_key_in_configmap if {
	got := secrets.deny with input as cm({"tls.key": pem, "aws": aws_key})
	count(got) == 2
	every r in got {
		not contains(r.msg, aws_key)
		not contains(r.msg, "MIIEowIBAAKCAQEA")
	}
	some r in got
	contains(r.msg, `key "tls.key" holds a private key`)
}

test_fail_token_in_env if {
	token := "ghp_0123456789abcdefghijABCDEFGHIJ0123456789"
	c := object.union(fx.good_container, {"env": [{"name": "GITHUB", "value": token}, {"name": "DB_PASSWORD", "value": "hunter2hunter2"}]})
	got := secrets.deny with input as fx.deployment("shop", 2, [c])
	count(got) == 2
	every r in got {
		not contains(r.msg, token)
		not contains(r.msg, "hunter2")
	}
}
