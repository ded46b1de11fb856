# A Deployment or StatefulSet in a production namespace with no
# PodDisruptionBudget selecting its pods (warn).
#
# Input: every rendered object at once, in conftest's --combine shape
# ([{"path": ..., "contents": object}]), because the check relates objects.
package sluice.kubernetes_combined.pdb

import data.sluice.lib.kubernetes as k8s

objects := [obj |
	is_array(input)
	some item in input
	obj := item.contents
	is_object(obj)
]

warn contains k8s.result(obj, msg) if {
	some obj in objects
	obj.kind in {"Deployment", "StatefulSet"}
	ns := k8s.namespace(obj)
	k8s.production(ns)
	not covered(obj)
	msg := sprintf("%s: no PodDisruptionBudget selects its pods in production namespace %s", [k8s.id(obj), ns])
}

# covered holds when a PDB in the same namespace selects the pod template's
# labels (matchLabels all present; a PDB with matchExpressions is trusted).
covered(obj) if {
	labels := object.get(obj, ["spec", "template", "metadata", "labels"], {})
	some pdb in objects
	pdb.kind == "PodDisruptionBudget"
	k8s.namespace(pdb) == k8s.namespace(obj)
	selector := object.get(pdb, ["spec", "selector"], {})
	matches(selector, labels)
}

matches(selector, labels) if {
	match := object.get(selector, "matchLabels", {})
	count(match) > 0
	every k, v in match {
		labels[k] == v
	}
}

matches(selector, _) if count(object.get(selector, "matchExpressions", [])) > 0
