package sluice.kubernetes.resources_test

import data.sluice.kubernetes.fixtures_test as fx
import data.sluice.kubernetes.resources

test_pass_limits_set if {
	count(resources.warn) == 0 with input as fx.deployment("shop", 2, [fx.good_container])
}

test_pass_not_a_workload if {
	count(resources.warn) == 0 with input as {"kind": "Service", "metadata": {"name": "web"}}
}

test_fail_missing_memory_limit if {
	c := object.union(object.remove(fx.good_container, ["resources"]), {"resources": {"limits": {"cpu": "1"}}})
	got := resources.warn with input as fx.deployment("shop", 2, [c])
	count(got) == 1
	some r in got
	contains(r.msg, "memory")
}

test_fail_cronjob_without_limits if {
	c := object.remove(fx.good_container, ["resources"])
	cj := {"kind": "CronJob", "metadata": {"name": "nightly"}, "spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [c]}}}}}}
	count(resources.warn) == 2 with input as cj
}
