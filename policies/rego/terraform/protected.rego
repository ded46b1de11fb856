# Destroying or replacing a protected resource: a type in the configured list
# (data.sluice.config.terraform.protected_types), or a resource tagged
# <protected_tag>=true before the change.
package sluice.terraform.protected

import data.sluice.lib.terraform as tf

deny contains tf.result(rc, msg) if {
	some rc in input.resource_changes
	rc.change.actions[_] == "delete"
	not rc.mode == "data"
	reason := protected_reason(rc)
	msg := sprintf("%s would be %s, but it is protected (%s)", [rc.address, tf.delete_word(rc), reason])
}

protected_reason(rc) := sprintf("type %s is in the protected list", [rc.type]) if {
	rc.type in tf.config("protected_types", [])
} else := sprintf("tag %s=true", [key]) if {
	key := tf.config("protected_tag", "protected")
	lower(sprintf("%v", [tf.tags_before(rc)[key]])) == "true"
}
