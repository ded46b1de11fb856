# Helpers shared by the Kubernetes policies. Input: one rendered object.
package sluice.lib.kubernetes

# config returns data.sluice.config.kubernetes[key], or def when unset.
config(key, def) := v if {
	v := data.sluice.config.kubernetes[key]
} else := def

workload_kinds := {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "ReplicationController", "Job"}

namespace(obj) := object.get(obj, ["metadata", "namespace"], "")

name(obj) := object.get(obj, ["metadata", "name"], "")

# id names an object the way findings do: Kind/namespace/name, or Kind/name
# for an object without a namespace.
id(obj) := sprintf("%s/%s/%s", [object.get(obj, "kind", ""), namespace(obj), name(obj)]) if {
	namespace(obj) != ""
} else := sprintf("%s/%s", [object.get(obj, "kind", ""), name(obj)])

# pod_spec is the pod template of a workload or the spec of a Pod; it is
# undefined for other kinds.
pod_spec(obj) := obj.spec if {
	obj.kind == "Pod"
} else := obj.spec.jobTemplate.spec.template.spec if {
	obj.kind == "CronJob"
} else := obj.spec.template.spec if {
	obj.kind in workload_kinds
}

# containers are every container of a pod spec: regular, init and ephemeral.
containers(spec) := array.concat(
	array.concat(object.get(spec, "containers", []), object.get(spec, "initContainers", [])),
	object.get(spec, "ephemeralContainers", []),
)

# production holds for a namespace matching a production pattern.
production(ns) if {
	some pattern in config("production_namespaces", [])
	glob.match(pattern, [], ns)
}

# result is the object every Kubernetes default rule returns.
result(obj, msg) := {"msg": msg, "resource": id(obj)}
