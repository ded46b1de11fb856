package sluice.kubernetes_combined.pdb_test

import data.sluice.kubernetes.fixtures_test as fx
import data.sluice.kubernetes_combined.pdb

pdb_obj(ns, labels) := {
	"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
	"metadata": {"name": "web", "namespace": ns},
	"spec": {"minAvailable": 1, "selector": {"matchLabels": labels}},
}

combined(objs) := [{"path": "manifests.yaml", "contents": o} | some o in objs]

test_pass_prod_deployment_with_pdb if {
	objs := [fx.deployment("checkout-prod", 3, [fx.good_container]), pdb_obj("checkout-prod", {"app": "web"})]
	count(pdb.warn) == 0 with input as combined(objs)
}

test_pass_staging_without_pdb if {
	count(pdb.warn) == 0 with input as combined([fx.deployment("checkout-staging", 3, [fx.good_container])])
}

test_fail_prod_deployment_without_pdb if {
	got := pdb.warn with input as combined([fx.deployment("checkout-prod", 3, [fx.good_container])])
	count(got) == 1
}

test_fail_pdb_selects_other_pods if {
	objs := [fx.deployment("checkout-prod", 3, [fx.good_container]), pdb_obj("checkout-prod", {"app": "worker"})]
	count(pdb.warn) == 1 with input as combined(objs)
}
