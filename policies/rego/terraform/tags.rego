# Required tags (data.sluice.config.terraform.required_tags) on every taggable
# resource (one with a tags or tags_all attribute) that is created or
# updated. tags_all, which includes provider default_tags, counts when known.
package sluice.terraform.tags

import data.sluice.lib.terraform as tf

required := tf.config("required_tags", [])

# untagged lists the created or updated taggable resources that miss a
# required tag (absent or empty), with the missing tags; both rules below
# read it, so the plan is walked once. The walk only tests for a missing
# tag; the set of missing tags is built for the resources that miss one.
# The expressions are inline, and rules are bound to locals before the walk,
# because they run for every change in the plan.
untagged contains {"rc": rc, "missing": missing} if {
	req := required
	count(req) > 0
	some rc in tf.live
	tags := effective_tags(rc.change.after)
	some tag in req
	object.get(tags, tag, "") == ""
	missing := {t | some t in req; object.get(tags, t, "") == ""}
}

deny contains {"msg": msg, "resource": rc.address} if {
	some u in untagged
	rc := u.rc
	unknown := object.get(rc.change, "after_unknown", {})
	unknown != true
	not tf.has_unknown(unknown, "tags_all")
	not tf.has_unknown(unknown, "tags")
	msg := sprintf("%s: required tags missing: %s", [rc.address, concat(", ", sort(u.missing))])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some u in untagged
	rc := u.rc
	some attr in ["tags", "tags_all"]
	tf.has_unknown(rc.change.after_unknown, attr)
	msg := sprintf("%s: %s is known only after apply, so required tags cannot be checked", [rc.address, attr])
}

unverifiable contains {"msg": msg, "resource": rc.address} if {
	some u in untagged
	rc := u.rc
	rc.change.after_unknown == true
	some attr in ["tags", "tags_all"]
	msg := sprintf("%s: %s is known only after apply, so required tags cannot be checked", [rc.address, attr])
}

# effective_tags are the tags a resource carries after the change: tags_all
# (which includes provider default_tags) when known, else tags; {} for a
# taggable resource with neither known, undefined for one that is not
# taggable (has neither attribute).
effective_tags(after) := t if {
	t := after.tags_all
	is_object(t)
} else := t if {
	t := after.tags
	is_object(t)
} else := {} if {
	_ := after.tags_all
} else := {} if {
	_ := after.tags
}
