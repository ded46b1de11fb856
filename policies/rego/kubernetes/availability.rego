# In production namespaces (data.sluice.config.kubernetes.production_namespaces,
# glob patterns) a Deployment or StatefulSet with a single replica is a warning.
# The PodDisruptionBudget check needs every object at once; it is in
# sluice.kubernetes_combined.pdb.
package sluice.kubernetes.availability

import data.sluice.lib.kubernetes as k8s

warn contains k8s.result(input, msg) if {
	input.kind in {"Deployment", "StatefulSet"}
	k8s.production(k8s.namespace(input))
	replicas := object.get(input, ["spec", "replicas"], 1)
	is_number(replicas)
	replicas < 2
	msg := sprintf("%s: %d replica in production namespace %s; one node drain takes it down", [k8s.id(input), replicas, k8s.namespace(input)])
}
