package sluice.kubernetes.availability_test

import data.sluice.kubernetes.availability
import data.sluice.kubernetes.fixtures_test as fx

test_pass_two_replicas_in_prod if {
	count(availability.warn) == 0 with input as fx.deployment("checkout-prod", 2, [fx.good_container])
}

test_pass_one_replica_in_staging if {
	count(availability.warn) == 0 with input as fx.deployment("checkout-staging", 1, [fx.good_container])
}

test_fail_single_replica_in_prod if {
	got := availability.warn with input as fx.deployment("checkout-prod", 1, [fx.good_container])
	count(got) == 1
}

test_fail_default_replicas_in_configured_prod_namespace if {
	obj := object.remove(fx.deployment("live", 1, [fx.good_container]), ["spec"])
	count(availability.warn) == 1 with input as obj with data.sluice.config.kubernetes.production_namespaces as ["live"]
}
