# Pod security: privileged containers, host namespaces, hostPath volumes and
# containers that may run as root (runAsNonRoot not true on the container or
# the pod).
package sluice.kubernetes.security

import data.sluice.lib.kubernetes as k8s

deny contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some c in k8s.containers(spec)
	object.get(c, ["securityContext", "privileged"], false) == true
	msg := sprintf("%s: container %q is privileged", [k8s.id(input), c.name])
}

deny contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some field in ["hostNetwork", "hostPID", "hostIPC"]
	object.get(spec, field, false) == true
	msg := sprintf("%s: %s shares the node's namespace", [k8s.id(input), field])
}

deny contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some v in object.get(spec, "volumes", [])
	v.hostPath
	msg := sprintf("%s: volume %q mounts a hostPath", [k8s.id(input), v.name])
}

deny contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some c in k8s.containers(spec)
	not run_as_non_root(spec, c)
	msg := sprintf("%s: container %q does not set runAsNonRoot: true (on the container or the pod)", [k8s.id(input), c.name])
}

# run_as_non_root: the container's own setting wins over the pod's.
run_as_non_root(_, c) if c.securityContext.runAsNonRoot == true

run_as_non_root(spec, c) if {
	not has_container_setting(c)
	spec.securityContext.runAsNonRoot == true
}

has_container_setting(c) if is_boolean(c.securityContext.runAsNonRoot)
