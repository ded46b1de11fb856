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
# The PDBs are indexed by each of their matchLabels pairs, so a workload
# looks only at the PDBs sharing one of its labels: a namespace with
# thousands of workloads and PDBs costs linear time, not their product.
covered(obj) if {
	labels := object.get(obj, ["spec", "template", "metadata", "labels"], {})
	ns := k8s.namespace(obj)

	# The whole index first: looked up by a key, OPA would evaluate the
	# rule for that key alone, walking every PDB again for each workload.
	index := pdbs_by_label
	some k, v in labels
	some i in index[label_key(ns, k, v)]
	matches(object.get(pdbs[i], ["spec", "selector"], {}), labels)
}

covered(obj) if k8s.namespace(obj) in namespaces_trusting_expressions

pdbs := [pdb |
	some pdb in objects
	pdb.kind == "PodDisruptionBudget"
]

# pdbs_by_label: "namespace\x00key\x00value" -> indexes in pdbs of the PDBs
# whose matchLabels hold that pair.
pdbs_by_label[label_key(k8s.namespace(pdb), k, v)] contains i if {
	some i, pdb in pdbs
	some k, v in object.get(pdb, ["spec", "selector", "matchLabels"], {})
}

label_key(ns, k, v) := concat("\u0000", [ns, k, sprintf("%v", [v])])

namespaces_trusting_expressions contains k8s.namespace(pdb) if {
	some pdb in pdbs
	count(object.get(pdb, ["spec", "selector", "matchExpressions"], [])) > 0
}

matches(selector, labels) if {
	match := object.get(selector, "matchLabels", {})
	count(match) > 0
	every k, v in match {
		labels[k] == v
	}
}
