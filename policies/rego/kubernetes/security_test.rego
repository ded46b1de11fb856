package sluice.kubernetes.security_test

import data.sluice.kubernetes.fixtures_test as fx
import data.sluice.kubernetes.security

test_pass_hardened_deployment if {
	count(security.deny) == 0 with input as fx.deployment("shop", 2, [fx.good_container])
}

test_pass_pod_level_run_as_non_root if {
	c := object.remove(fx.good_container, ["securityContext"])
	obj := fx.with_pod_spec(fx.deployment("shop", 2, [c]), {"securityContext": {"runAsNonRoot": true}})
	count(security.deny) == 0 with input as obj
}

test_fail_privileged_container if {
	c := object.union(fx.good_container, {"securityContext": {"privileged": true, "runAsNonRoot": true}})
	got := security.deny with input as fx.deployment("shop", 2, [c])
	some r in got
	r.resource == "Deployment/shop/web"
	contains(r.msg, "privileged")
}

test_fail_host_namespaces_and_host_path if {
	obj := fx.with_pod_spec(fx.deployment("shop", 2, [fx.good_container]), {
		"hostNetwork": true, "hostPID": true,
		"volumes": [{"name": "docker", "hostPath": {"path": "/var/run/docker.sock"}}],
	})
	count(security.deny) == 3 with input as obj
}

test_fail_missing_run_as_non_root if {
	c := object.remove(fx.good_container, ["securityContext"])
	got := security.deny with input as fx.deployment("shop", 2, [c])
	some r in got
	contains(r.msg, "runAsNonRoot")
}

test_fail_container_overrides_pod_run_as_non_root if {
	c := object.union(fx.good_container, {"securityContext": {"runAsNonRoot": false}})
	obj := fx.with_pod_spec(fx.deployment("shop", 2, [c]), {"securityContext": {"runAsNonRoot": true}})
	count(security.deny) == 1 with input as obj
}
