# Required tags (data.sluice.config.terraform.required_tags) on every taggable
# resource (one with a tags or tags_all attribute) that is created or
# updated. tags_all, which includes provider default_tags, counts when known.
package sluice.terraform.tags

import data.sluice.lib.terraform as tf

required := tf.config("required_tags", [])

# live_taggable are the created or updated resources that take tags; the
# filters are inline because this policy walks every change.
live_taggable contains rc if {
	count(required) > 0
	some rc in input.resource_changes
	some action in rc.change.actions
	action in {"create", "update"}
	not rc.mode == "data"
	keys := object.keys(rc.change.after)
	count({"tags", "tags_all"} & keys) > 0
}

deny contains tf.result(rc, msg) if {
	some rc in live_taggable
	not tf.unknown(rc, "tags_all")
	not tf.unknown(rc, "tags")
	missing := missing_tags(effective_tags(rc.change.after))
	count(missing) > 0
	msg := sprintf("%s: required tags missing: %s", [rc.address, concat(", ", sort(missing))])
}

unverifiable contains tf.result(rc, msg) if {
	some rc in live_taggable
	some attr in ["tags", "tags_all"]
	tf.unknown(rc, attr)
	count(missing_tags(effective_tags(rc.change.after))) > 0
	msg := sprintf("%s: %s is known only after apply, so required tags cannot be checked", [rc.address, attr])
}

effective_tags(after) := t if {
	t := after.tags_all
	is_object(t)
} else := t if {
	t := after.tags
	is_object(t)
} else := {}

missing_tags(tags) := {tag |
	some tag in required
	object.get(tags, tag, "") == ""
}
