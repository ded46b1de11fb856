# Fixtures shared by the Kubernetes policy tests.
package sluice.kubernetes.fixtures_test

# good_container passes every per-container check.
good_container := {
	"name": "app",
	"image": "ghcr.io/acme/app:1.4.2",
	"securityContext": {"runAsNonRoot": true},
	"resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
}

deployment(ns, replicas, containers) := {
	"apiVersion": "apps/v1",
	"kind": "Deployment",
	"metadata": {"name": "web", "namespace": ns},
	"spec": {
		"replicas": replicas,
		"selector": {"matchLabels": {"app": "web"}},
		"template": {
			"metadata": {"labels": {"app": "web"}},
			"spec": {"containers": containers},
		},
	},
}

with_pod_spec(obj, extra) := object.union(obj, {"spec": {"template": {"spec": object.union(obj.spec.template.spec, extra)}}})
