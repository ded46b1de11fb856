# A careless policy that quotes the value it found; the engine's redaction
# must still keep the secret out of every finding.
package main

deny contains msg if {
	input.kind == "ConfigMap"
	some k, v in input.data
	msg := sprintf("ConfigMap key %s = %s", [k, v])
}

warn contains msg if {
	some rc in input.resource_changes
	msg := sprintf("%s password is %s", [rc.address, rc.change.after.password])
}
