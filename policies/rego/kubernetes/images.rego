# Images: ":latest" or no tag (which means latest) unless pinned by digest,
# and images from registries outside data.sluice.config.kubernetes.allowed_registries
# (an empty list allows any registry).
package sluice.kubernetes.images

import data.sluice.lib.kubernetes as k8s

deny contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some c in k8s.containers(spec)
	not contains(c.image, "@")
	tag(c.image) == ""
	msg := sprintf("%s: container %q image %q has no tag (it would run :latest)", [k8s.id(input), c.name, c.image])
}

deny contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some c in k8s.containers(spec)
	not contains(c.image, "@")
	tag(c.image) == "latest"
	msg := sprintf("%s: container %q image %q uses the mutable tag latest", [k8s.id(input), c.name, c.image])
}

deny contains k8s.result(input, msg) if {
	spec := k8s.pod_spec(input)
	some c in k8s.containers(spec)
	allowed := k8s.config("allowed_registries", [])
	count(allowed) > 0
	reg := registry(c.image)
	not reg in allowed
	msg := sprintf("%s: container %q image %q comes from registry %s, which is not allowed", [k8s.id(input), c.name, c.image, reg])
}

# tag is the tag of an image reference ("" when it has none). A colon in the
# first path component is a registry port, not a tag.
tag(image) := t if {
	name := split(image, "@")[0]
	parts := split(name, "/")
	last := parts[count(parts) - 1]
	contains(last, ":")
	t := split(last, ":")[1]
} else := ""

# registry is the registry host of an image reference: the first path
# component when it looks like a host, else docker.io.
registry(image) := r if {
	parts := split(image, "/")
	count(parts) > 1
	first := parts[0]
	looks_like_host(first)
	r := first
} else := "docker.io"

looks_like_host(s) if contains(s, ".")

looks_like_host(s) if contains(s, ":")

looks_like_host("localhost")
