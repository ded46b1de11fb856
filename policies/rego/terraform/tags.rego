# Required tags (data.sluice.config.terraform.required_tags) on every taggable
# resource that is created or updated. tags_all (which includes provider
# default_tags) counts when it is known.
package sluice.terraform.tags

import data.sluice.lib.terraform as tf

deny contains tf.result(rc, msg) if {
	some rc in tf.changes
	tf.creates_or_updates(rc)
	taggable(rc)
	not tf.unknown(rc, ["tags_all"])
	not tf.unknown(rc, ["tags"])
	missing := missing_tags(rc)
	count(missing) > 0
	msg := sprintf("%s: required tags missing: %s", [rc.address, concat(", ", sort(missing))])
}

unverifiable contains tf.result(rc, msg) if {
	some rc in tf.changes
	tf.creates_or_updates(rc)
	taggable(rc)
	some attr in ["tags", "tags_all"]
	tf.unknown(rc, [attr])
	count(missing_tags(rc)) > 0
	msg := sprintf("%s: %s is known only after apply, so required tags cannot be checked", [rc.address, attr])
}

taggable(rc) if "tags" in object.keys(tf.after(rc))

taggable(rc) if "tags_all" in object.keys(tf.after(rc))

effective_tags(rc) := t if {
	t := tf.after(rc).tags_all
	is_object(t)
} else := t if {
	t := tf.after(rc).tags
	is_object(t)
} else := {}

missing_tags(rc) := {tag |
	some tag in tf.config("required_tags", [])
	object.get(effective_tags(rc), tag, "") == ""
}
