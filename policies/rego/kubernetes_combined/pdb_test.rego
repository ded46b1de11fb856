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

labelled(ns, labels) := object.union(
	fx.deployment(ns, 3, [fx.good_container]),
	{"spec": {"template": {"metadata": {"labels": labels}}}},
)

test_fail_pdb_needs_a_label_the_pods_lack if {
	objs := [labelled("checkout-prod", {"app": "web", "tier": "front"}), pdb_obj("checkout-prod", {"app": "web", "track": "canary"})]
	count(pdb.warn) == 1 with input as combined(objs)
}

test_pass_pdb_selects_a_subset_of_the_labels if {
	objs := [labelled("checkout-prod", {"app": "web", "tier": "front"}), pdb_obj("checkout-prod", {"tier": "front"})]
	count(pdb.warn) == 0 with input as combined(objs)
}

test_fail_pdb_in_another_namespace if {
	objs := [fx.deployment("checkout-prod", 3, [fx.good_container]), pdb_obj("other-prod", {"app": "web"})]
	count(pdb.warn) == 1 with input as combined(objs)
}

test_pass_pdb_with_match_expressions_is_trusted if {
	expr := {
		"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
		"metadata": {"name": "any", "namespace": "checkout-prod"},
		"spec": {"minAvailable": 1, "selector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}},
	}
	count(pdb.warn) == 0 with input as combined([fx.deployment("checkout-prod", 3, [fx.good_container]), expr])
}
