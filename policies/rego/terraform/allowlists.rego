# Instance types and AMIs outside the allowlists
# (data.sluice.config.terraform.allowed_instance_types / allowed_amis, glob
# patterns; an empty AMI list allows any AMI).
package sluice.terraform.allowlists

import data.sluice.lib.terraform as tf

# attrs: resource type -> {check: attribute}.
attrs := {
	"aws_instance": {"instance_type": "instance_type", "ami": "ami"},
	"aws_spot_instance_request": {"instance_type": "instance_type", "ami": "ami"},
	"aws_launch_template": {"instance_type": "instance_type", "ami": "image_id"},
	"aws_launch_configuration": {"instance_type": "instance_type", "ami": "image_id"},
}

allowlist("instance_type") := tf.config("allowed_instance_types", [])

allowlist("ami") := tf.config("allowed_amis", [])

# The checks are filtered before the resources are walked, so an empty
# allowlist costs nothing per resource.
deny contains {"msg": msg, "resource": rc.address} if {
	some type, checks in attrs
	some check, attr in checks
	count(allowlist(check)) > 0
	some rc in tf.live_of(type)
	value := rc.change.after[attr]
	is_string(value)
	not allowed(check, value)
	msg := sprintf("%s: %s %q is not in the allowlist", [rc.address, attr, value])
}

# The unknown test is inline (see tf.has_unknown): it runs for every
# instance in the plan.
unverifiable contains {"msg": msg, "resource": rc.address} if {
	some type, checks in attrs
	some check, attr in checks
	count(allowlist(check)) > 0
	some rc in tf.live_of(type)
	walk(rc.change.after_unknown[attr], [_, true])
	msg := sprintf("%s: %s is known only after apply, so the %s allowlist cannot be checked", [rc.address, attr, check])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some type, checks in attrs
	some check, attr in checks
	count(allowlist(check)) > 0
	some rc in tf.live_of(type)
	rc.change.after_unknown == true
	msg := sprintf("%s: %s is known only after apply, so the %s allowlist cannot be checked", [rc.address, attr, check])
}

allowed(check, value) if {
	some pattern in allowlist(check)
	glob.match(pattern, [], value)
}
