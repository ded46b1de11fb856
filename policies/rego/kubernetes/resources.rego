# Containers without CPU and memory limits (warn: the scheduler still runs
# them, but one of them can starve its neighbours).
package sluice.kubernetes.resources

import data.sluice.lib.kubernetes as k8s

warn contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some c in k8s.containers(spec)
	some resource in ["cpu", "memory"]
	not c.resources.limits[resource]
	msg := sprintf("%s: container %q has no %s limit", [k8s.id(input), c.name, resource])
}
