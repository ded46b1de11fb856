# A conftest policy for Kubernetes manifests (`conftest test --namespace
# kubernetes manifests.yaml`).
package kubernetes

import rego.v1

deny contains msg if {
	input.kind == "Deployment"
	some c in input.spec.template.spec.containers
	not c.resources.limits.memory
	msg := sprintf("%s/%s: container %s has no memory limit", [input.kind, input.metadata.name, c.name])
}

warn contains msg if {
	input.kind == "Service"
	input.spec.type == "LoadBalancer"
	msg := sprintf("Service/%s: LoadBalancer services cost money", [input.metadata.name])
}

deny contains {"msg": msg} if {
	input.kind == "ConfigMap"
	some key, _ in input.data
	contains(lower(key), "password")
	msg := sprintf("ConfigMap/%s: key %s looks like a password", [input.metadata.name, key])
}
