# Helpers shared by the Terraform policies. Input: a plan in JSON
# (terraform show -json PLANFILE).
package sluice.lib.terraform

# config returns data.sluice.config.terraform[key], or def when unset, so the
# policies also run without the default data (plain conftest).
config(key, def) := v if {
	v := data.sluice.config.terraform[key]
} else := def

# changes are the planned changes of managed resources (data sources are read,
# never changed).
changes contains rc if {
	some rc in input.resource_changes
	object.get(rc, "mode", "managed") == "managed"
}

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

# unknown holds when the value at path (a list of keys) of the planned value,
# or any part of it, is known only after apply. Checks that depend on such a
# value report unverifiable instead of passing.
unknown(rc, path) if {
	some n in numbers.range(0, count(path))
	object.get(after_unknown(rc), array.slice(path, 0, n), false) == true
}

unknown(rc, path) if {
	v := object.get(after_unknown(rc), path, false)
	not is_boolean(v)
	walk(v, [_, true])
}

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
