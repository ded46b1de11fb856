# Helpers shared by the Terraform policies. Input: a plan in JSON
# (terraform show -json PLANFILE).
package sluice.lib.terraform

# config returns data.sluice.config.terraform[key], or def when unset, so the
# policies also run without the default data (plain conftest).
config(key, def) := v if {
	v := data.sluice.config.terraform[key]
} else := def

# changes are the planned changes of managed resources (data sources are read,
# never changed). Policies that check one type use changes_of instead.
changes := [rc |
	some rc in input.resource_changes
	not rc.mode == "data"
]

# by_type groups the changes of managed resources by type. The inner
# comprehension is indexed by OPA on t, so grouping takes one pass over the
# plan however many types there are, and each policy walks only its types.
by_type := {t: rcs |
	some t in {rc.type | some rc in input.resource_changes}
	rcs := [rc | rc := input.resource_changes[_]; rc.type == t; rc.mode == "managed"]
}

# changes_of lists the changes of managed resources of one type.
changes_of(type) := object.get(by_type, type, [])

# live_by_type groups the changes of managed resources that create or update
# them (creates_or_updates, inlined) by type: the action test runs once per
# resource instead of once per rule. A function call per resource costs
# several times an inline expression in OPA, which matters on plans of
# thousands of resources.
live_by_type := {t: live |
	some t, rcs in by_type
	live := [rc | some rc in rcs; rc.change.actions[_] in {"create", "update"}]
}

# live lists the changes of managed resources that create or update them,
# grouped by type.
live := [rc | some rcs in live_by_type; some rc in rcs]

# live_of lists the created or updated managed resources of one type: the
# elements of changes_of(type) for which creates_or_updates holds.
live_of(type) := object.get(live_by_type, type, [])

actions(rc) := object.get(rc, ["change", "actions"], [])

# creates_or_updates holds when the resource exists after the change.
creates_or_updates(rc) if "create" in actions(rc)

creates_or_updates(rc) if "update" in actions(rc)

# deletes holds for a destroy and for a replace (delete+create either order).
deletes(rc) if "delete" in actions(rc)

# delete_word says how a deleting change removes the resource.
delete_word(rc) := "replaced" if {
	"create" in actions(rc)
} else := "destroyed"

# after is the planned value, {} when there is none (a destroy).
after(rc) := a if {
	a := rc.change.after
	is_object(a)
} else := {}

# before is the prior value, {} when there is none (a create).
before(rc) := b if {
	b := rc.change.before
	is_object(b)
} else := {}

after_unknown(rc) := u if {
	u := rc.change.after_unknown
	is_object(u)
} else := {}

# unknown holds when the planned value of attribute key, or any part of it,
# is known only after apply. Checks that depend on such a value report
# unverifiable instead of passing.
unknown(rc, _) if rc.change.after_unknown == true

# walk visits the value itself too, so this also holds for a plain true.
unknown(rc, key) if walk(rc.change.after_unknown[key], [_, true])

# has_unknown holds when attribute key of an after_unknown object is true
# or holds a true: the value, or a part of it, is known only after apply.
# For rules that read rc.change.after_unknown inline, where tf.unknown would
# cost a call per resource (OPA evaluates an argument ref before a "not", so
# the lookup must happen inside the function).
has_unknown(u, key) if walk(u[key], [_, true])

# tags_before are the tags a resource had before the change (tags_all
# includes provider default_tags).
tags_before(rc) := t if {
	t := before(rc).tags_all
	is_object(t)
} else := t if {
	t := before(rc).tags
	is_object(t)
} else := {}

# result is the object every Terraform default rule returns.
result(rc, msg) := {"msg": msg, "resource": rc.address}
