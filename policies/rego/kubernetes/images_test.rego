package sluice.kubernetes.images_test

import data.sluice.kubernetes.fixtures_test as fx
import data.sluice.kubernetes.images

image(ref) := fx.deployment("shop", 2, [object.union(fx.good_container, {"image": ref})])

test_pass_tagged_image_allowed_registry if {
	count(images.deny) == 0 with input as image("ghcr.io/acme/app:1.4.2")
}

test_pass_digest_and_registry_port if {
	count(images.deny) == 0 with input as image("ghcr.io/acme/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
	count(images.deny) == 0 with input as image("registry.internal:5000/app:2.0") with data.sluice.config.kubernetes.allowed_registries as ["registry.internal:5000"]
	count(images.deny) == 0 with input as image("nginx:1.27")
}

test_fail_latest_tag if {
	got := images.deny with input as image("ghcr.io/acme/app:latest")
	some r in got
	contains(r.msg, "latest")
}

test_fail_untagged_image if {
	got := images.deny with input as image("nginx")
	count(got) == 1
	some r in got
	contains(r.msg, "no tag")
}

test_fail_registry_not_allowed if {
	got := images.deny with input as image("evil.example.com/miner:1.0")
	some r in got
	contains(r.msg, "evil.example.com")
}
