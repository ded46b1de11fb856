# A conftest policy for `conftest test --combine`: input is every document,
# [{"path": ..., "contents": ...}].
package combined

import rego.v1

deny contains msg if {
	is_array(input)
	some item in input
	item.contents.kind == "Deployment"
	name := item.contents.metadata.name
	not service_named(name)
	msg := sprintf("Deployment/%s has no Service", [name])
}

warn contains msg if {
	is_array(input)
	count(input) > 2
	msg := sprintf("%d documents in one release", [count(input)])
}

service_named(name) if {
	some item in input
	item.contents.kind == "Service"
	item.contents.metadata.name == name
}
