# Required tags (data.sluice.config.terraform.required_tags) on every taggable
# resource (one with a tags or tags_all attribute) that is created or
# updated. tags_all, which includes provider default_tags, counts when known.
package sluice.terraform.tags

import data.sluice.lib.terraform as tf

required := tf.config("required_tags", [])

# untagged lists the created or updated taggable resources that miss a
# required tag, with the missing tags; both rules below read it, so the plan
# is walked once. The filters are inline because this walks every change.
untagged := [{"rc": rc, "missing": missing} |
	count(required) > 0
	some rc in input.resource_changes
	some action in rc.change.actions
	action in {"create", "update"}
	not rc.mode == "data"
	after := rc.change.after
	count({"tags", "tags_all"} & object.keys(after)) > 0
	missing := missing_tags(effective_tags(after))
	count(missing) > 0
]

deny contains tf.result(rc, msg) if {
	some u in untagged
	rc := u.rc
	not tf.unknown(rc, "tags_all")
	not tf.unknown(rc, "tags")
	msg := sprintf("%s: required tags missing: %s", [rc.address, concat(", ", sort(u.missing))])
}

unverifiable contains tf.result(rc, msg) if {
	some u in untagged
	rc := u.rc
	some attr in ["tags", "tags_all"]
	tf.unknown(rc, attr)
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
